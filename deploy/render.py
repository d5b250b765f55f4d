"""Render deploy/kubernetes/archipelago.yaml from the Helm chart (deploy/helm/archipelago) with its default values, so
that the plain manifests and the chart never drift (the test suite renders it again and compares):

    .venv/bin/python deploy/render.py            # writes the file
    .venv/bin/python deploy/render.py --check    # exit 1 if the file differs from the chart's rendering
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CHART = HERE / "helm" / "archipelago"
MANIFEST = HERE / "kubernetes" / "archipelago.yaml"
HEADER = """\
# The broker in a management cluster, on an external PostgreSQL: the Helm chart deploy/helm/archipelago rendered with
# its default values (deploy/render.py writes this file; do not edit it by hand). Fill the Secret first.
apiVersion: v1
kind: Namespace
metadata:
  name: archipelago
"""


def helm() -> str:
    found = Path(sys.executable).with_name("helm")
    return str(found) if found.exists() else "helm"


def rendered() -> str:
    output = subprocess.run([helm(), "template", "archipelago", str(CHART), "--namespace", "archipelago"],
                            capture_output=True, text=True, check=True).stdout
    return HEADER + output


def main() -> int:
    text = rendered()
    if "--check" in sys.argv:
        if MANIFEST.read_text() != text:
            print(f"{MANIFEST} differs from the chart's rendering: run deploy/render.py", file=sys.stderr)
            return 1
        return 0
    MANIFEST.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
