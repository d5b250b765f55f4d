"""`archipelago device-classes ...`: which DRA device classes count as which quota resource (Kueue's
deviceClassMappings), so that queues' quotas, fair shares and the dashboard count devices and partitions."""

from __future__ import annotations

from typing import List, Optional

import typer

from broker.cli.output import Output, OutputOption, ServerOption, TokenOption, calling, client, emit

device_classes_app = typer.Typer(no_args_is_help=True, help="Device-class quota mappings: DRA devices counted as a "
                                                            "quota resource.")
MAPPING_COLUMNS = [("RESOURCE", lambda m: m["resource"]), ("DEVICE CLASSES", lambda m: ",".join(m["deviceClasses"]))]


@device_classes_app.command("list")
def mappings_list(output: Output = OutputOption, server: Optional[str] = ServerOption,
                  token: Optional[str] = TokenOption) -> None:
    """Every mapping."""
    emit(calling(lambda: client(server, token).get("/api/v1/device-class-mappings")), output, MAPPING_COLUMNS)


@device_classes_app.command("map")
def mappings_set(resource: str = typer.Argument(..., help="the quota resource, e.g. nvidia.com/mig-1g.10gb"),
                 device_class: List[str] = typer.Option(..., "--class", help="a DeviceClass counted as it (repeat)"),
                 output: Output = OutputOption, server: Optional[str] = ServerOption,
                 token: Optional[str] = TokenOption) -> None:
    """Count devices of these classes as RESOURCE (for jobs submitted from now on)."""
    emit(calling(lambda: client(server, token).put(f"/api/v1/device-class-mappings/{resource}",
                                                   json={"deviceClasses": device_class})), output, MAPPING_COLUMNS)


@device_classes_app.command("unmap")
def mappings_delete(resource: str, server: Optional[str] = ServerOption, token: Optional[str] = TokenOption) -> None:
    """Stop counting devices as RESOURCE."""
    calling(lambda: client(server, token).delete(f"/api/v1/device-class-mappings/{resource}"))
    typer.echo(f"device-class mapping {resource} removed")
