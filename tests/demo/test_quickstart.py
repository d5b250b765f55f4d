"""The README's quick start, run line by line as a newcomer would: `archipelago demo` in one process, and the block
marked `<!-- quickstart -->` in one bash session beside it, from the checkout. Every line must succeed; `<ID>` is the
id the line before printed, as the README says, and `demo-run/` is this test's own folder for the demo."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MARK = "<!-- quickstart -->"
DEADLINE = 120.0


def quick_start() -> list[str]:
    """The lines of the fenced block after the marker, without their comments."""
    text = (ROOT / "README.md").read_text()
    assert MARK in text, "README.md has no block marked <!-- quickstart -->"
    block = re.search(r"```sh\n(.*?)```", text[text.index(MARK):], re.S)
    lines = [re.sub(r"\s+#.*$", "", line).strip() for line in block.group(1).splitlines()]
    return [line for line in lines if line]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Shell:
    """One bash session: each line runs in it, and its output and exit status come back."""

    def __init__(self, cwd: Path, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env, text=True,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def run(self, line: str) -> tuple[int, str]:
        marker = f"__done_{time.monotonic_ns()}__"
        self.process.stdin.write(f"{line}\necho {marker} $?\n")
        self.process.stdin.flush()
        output = []
        for out in self.process.stdout:
            if out.startswith(marker):
                return int(out.split()[1]), "".join(output)
            output.append(out)
        raise AssertionError(f"the shell ended during: {line}\n{''.join(output)}")

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(30)


@pytest.fixture
def demo(tmp_path):
    """`archipelago demo` as `make demo` runs it, on a port and in a folder of this test's own."""
    workdir, port = tmp_path / "demo-run", _free_port()
    log = open(tmp_path / "demo.log", "w")
    command = [str(Path(sys.executable).parent / "archipelago"), "demo", "--port", str(port), "--workdir",
               str(workdir), "--duration", "600"]
    process = subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    until = time.monotonic() + DEADLINE
    while not all((workdir / f"{who}.env").exists() for who in ("admin", "research", "vision")):
        assert process.poll() is None, (tmp_path / "demo.log").read_text()[-3000:]
        assert time.monotonic() < until, "the demo wrote no .env files"
        time.sleep(0.2)
    yield workdir
    process.terminate()
    process.wait(60)
    log.close()


def test_the_quick_start_works_as_written(demo):
    lines = quick_start()
    assert any(line.startswith("archipelago submit") for line in lines) and any("<ID>" in line for line in lines)
    activate = ROOT / ".venv" / "bin" / "activate"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARCHIPELAGO_")}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"  # the interpreter running the tests, if not .venv's
    shell, job_id = Shell(ROOT, env), None
    try:
        for line in lines:
            if line == "source .venv/bin/activate" and not activate.exists():
                continue  # tests run from another environment: its `archipelago` is on PATH already
            line = line.replace("demo-run/", f"{demo}/")
            if "<ID>" in line:
                assert job_id is not None, "a line uses <ID> before any submit printed one"
                line = line.replace("<ID>", job_id)
            status, output = shell.run(line)
            assert status == 0, f"{line!r} failed ({status}):\n{output}"
            assert "Traceback" not in output, f"{line!r}:\n{output}"
            if line.startswith("archipelago submit") and "--dry-run" not in line:
                job_id = re.search(r"^\W*(\d+)\b", output, re.M).group(1)  # the first cell of the first row
    finally:
        shell.close()
    assert job_id is not None
