"""Settings from the environment (prefix ARCHIPELAGO_); nothing is read at import time."""

from __future__ import annotations

import os
import secrets
from functools import lru_cache
from pathlib import Path
from typing import Literal

from cryptography.fernet import Fernet
from pydantic import Field, FilePath, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

DEFAULT_DATABASE_URL = "sqlite:///./archipelago.db"
SECRET_FILE_NAME = "archipelago.secret"


class ConfigError(Exception):
    """Bad configuration; its message is one line that says what to fix."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ARCHIPELAGO_", extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    secret_key: str | None = None
    admin_token: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    # `serve` speaks HTTPS with this certificate (chain) and key; kubectl sends its token over HTTPS only.
    tls_certfile: FilePath | None = None
    tls_keyfile: FilePath | None = None

    # Single sign-on: an OpenID provider whose ID tokens the API, the /k8s front door, the dashboard (authorization
    # code with PKCE) and the CLI (device flow) accept, for this client id (their `aud`). The user is the
    # `oidc_username_claim`; a member of a group in `oidc_admin_groups` is an admin; `oidc_group_tenants` maps the
    # provider's groups to tenants (a user in several chooses per request: ?tenant= or X-Archipelago-Tenant).
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_username_claim: str = "email"
    oidc_groups_claim: str = "groups"
    oidc_admin_groups: list[str] = []
    oidc_group_tenants: dict[str, str] = {}
    oidc_clock_skew: float = Field(60.0, ge=0)  # seconds of leeway on exp, nbf and iat
    oidc_ca_file: FilePath | None = None  # the issuer's CA, when not a public one
    # the least seconds between two fetches of the issuer's keys for a token naming a key not seen (rotation)
    oidc_key_refresh_cooldown: float = Field(5.0, ge=0)

    # Largest request body the API reads (a batch of JobSets), in bytes; bounded while it is read, on every route.
    max_request_bytes: int = Field(16 * 1024 * 1024, ge=1024)
    # Most Kubernetes watches (/k8s ...?watch=true) one token holds open at once; one more gets 429.
    max_watches_per_token: int = Field(10, ge=1)
    # Namespaces no tenant may be given, beyond default, kube-*, openshift-* and archipelago-system.
    reserved_namespaces: list[str] = []
    # Largest JobSet the broker accepts (its JSON, as kube-apiserver bounds an object at 1.5 MiB in etcd), most
    # ReplicatedJobs in one, most parts of a split job (each is a placement and a JobSet on a member).
    max_jobset_bytes: int = Field(1536 * 1024, ge=1024)
    max_replicated_jobs: int = Field(500, ge=1)
    max_split_parts: int = Field(100, ge=1)

    # Priority class name (label kueue.x-k8s.io/priority-class) → priority; higher runs first.
    priority_classes: dict[str, int] = {"low": 100, "normal": 1000, "high": 10000}
    default_priority_class: str = "normal"

    # False serves the API alone (an extra API replica); the loop services run in one process only.
    run_loops: bool = True
    # The leader lease (seconds): replicas that run loops take it in turn; its holder renews it every
    # renew period, and another replica takes it over once a holder has not renewed it for the duration.
    lease_duration: float = Field(10.0, gt=0)
    lease_renew_period: float = Field(2.0, gt=0)

    # `serve` logs at this level, as lines of text or one JSON object per line.
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    log_format: Literal["text", "json"] = "text"

    # /metrics answers this bearer token (or an admin's); queues are labelled by id unless names may show.
    metrics_token: str | None = None
    metrics_queue_names: bool = False
    # Where the process that runs the loops serves their figures on its own (under `serve --workers N` the API's
    # /metrics is the workers', which run no loops); unset: nowhere but the API's.
    loops_metrics_port: int | None = Field(None, ge=1, le=65535)

    # Loop intervals, in seconds.
    scheduler_interval: float = Field(2.0, gt=0)
    # The scheduler re-reads every pending job this often, beyond the new ones each cycle (0: every cycle).
    scheduler_resync_interval: float = Field(300.0, ge=0)
    cluster_sync_interval: float = Field(30.0, ge=0)  # 0: every member is resynced on every pass
    health_probe_interval: float = Field(5.0, gt=0)
    status_poll_interval: float = Field(5.0, gt=0)
    dispatch_interval: float = Field(1.0, gt=0)

    # Placement engine: score weights override the defaults (TightestTier 4, BinPacking 2, Spread 0,
    # Locality 1); a queue's LowerPriority policy applies only while preemption is on; a job waiting
    # longer than starvation_after seconds goes first and, if it does not fit, may hold the nodes of one
    # HyperNode for itself (the oldest max_holds such jobs in a cycle).
    placement_score_weights: dict[str, float] = {}
    placement_disabled_filters: list[str] = []  # e.g. ["TaintToleration"]; the gang's fit is always checked
    placement_preemption: bool = True
    placement_starvation_after: float = Field(900.0, gt=0)
    placement_max_holds: int = Field(32, ge=0)

    # History: finished jobs (and their placements) and events older than this many days are deleted, in
    # bounded batches, every retention_interval seconds; 0 keeps everything.
    retention_days: float = Field(30.0, ge=0)
    retention_interval: float = Field(600.0, gt=0)

    # When will it start: the forecast loop plays the fleet forward every forecast_interval seconds, for the first
    # forecast_window waiting jobs (each queue's head first), no further than forecast_horizon seconds nor longer
    # than forecast_budget seconds of its own time (it shares the scheduler's cores); a job whose
    # runtime nothing else tells (its declaration, what finished jobs like it took, its Jobs' deadlines, its
    # queue's default) is expected to run forecast_default_runtime seconds.
    forecast_interval: float = Field(30.0, gt=0)
    forecast_window: int = Field(2000, ge=1)
    forecast_horizon: float = Field(7 * 86400.0, gt=0)
    forecast_budget: float = Field(2.0, gt=0)
    forecast_default_runtime: float = Field(3600.0, gt=0)

    # Member health and recovery.
    not_ready_grace: float = Field(20.0, ge=0)
    failover_toleration: float = Field(300.0, ge=0)
    # Kueue's waitForPodsReady for the federation: a placement whose pods are not all ready this long
    # after it was applied is evicted (per job: archipelago.io/startup-timeout); its job waits
    # startup_backoff × 2^(evictions−1) seconds (at most an hour), avoids that member for
    # startup_avoid seconds, and fails at its startup_eviction_limit-th eviction.
    startup_timeout: float = Field(300.0, gt=0)
    startup_backoff: float = Field(60.0, ge=0)
    startup_avoid: float = Field(1800.0, ge=0)
    startup_eviction_limit: int = Field(3, ge=1)
    member_timeout: float = Field(5.0, gt=0)
    member_workers: int = Field(16, ge=1)  # members synced or probed at once
    # Requests a second to one member, and the burst saved up (client-go's token bucket), shared by the
    # inventory, status, dispatcher and health loops of that member; a 429's Retry-After pauses them all.
    member_qps: float = Field(50.0, gt=0)
    member_burst: int = Field(100, ge=1)

    # Topology of members without HyperNode objects, from node labels (Volcano's label discovery):
    # per tier, 1 = closest, the label keys that name a node's domain there; the first present wins.
    topology_tier_labels: list[list[str]] = [
        ["network.archipelago.io/leaf", "topology.k8s.aws/network-node-layer-3",
         "cloud.google.com/gce-topology-subblock"],
        ["network.archipelago.io/spine", "topology.k8s.aws/network-node-layer-2",
         "cloud.google.com/gce-topology-block"],
        ["topology.k8s.aws/network-node-layer-1", "topology.kubernetes.io/zone"],
    ]

    # The JobSet CustomResourceDefinition installed on the members (a YAML file): the Kubernetes front door
    # (/k8s) serves its schema in its OpenAPI document, for `kubectl explain`; unset, the schema is left open.
    jobset_crd: FilePath | None = None

    # Kubeconfig trust: each stays off unless an admin turns it on.
    allow_kubeconfig_exec: bool = False
    allow_kubeconfig_files: bool = False
    allow_insecure_tls: bool = False
    allow_kubeconfig_proxy: bool = False  # a kubeconfig's http(s) proxy-url

    @field_validator("database_url")
    @classmethod
    def _parsable_url(cls, value: str) -> str:
        try:
            url = make_url(value)
        except ArgumentError:
            raise ValueError(f"ARCHIPELAGO_DATABASE_URL {value!r} is not a database URL; "
                             "expected e.g. sqlite:///./archipelago.db or postgresql+psycopg://user@host/db")
        if url.get_backend_name() not in ("sqlite", "postgresql"):
            raise ValueError(f"ARCHIPELAGO_DATABASE_URL uses {url.get_backend_name()!r}; "
                             "Archipelago runs on sqlite or postgresql")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper_level(cls, value: str) -> str:
        return value.upper() if isinstance(value, str) else value

    @model_validator(mode="after")
    def _renewed_within_duration(self) -> Settings:
        # A holder acts only until a renew period short of expiry (`LeaseHolder.valid_until`); with a renew period
        # above a third of the duration, one slow renewal would leave it unable to act for part of every period.
        if self.lease_renew_period * 3 > self.lease_duration:
            raise ValueError(f"ARCHIPELAGO_LEASE_RENEW_PERIOD ({self.lease_renew_period:g} s) must be at most a third "
                             f"of ARCHIPELAGO_LEASE_DURATION ({self.lease_duration:g} s), so that a holder renews "
                             "well before it must stop acting")
        return self

    @model_validator(mode="after")
    def _member_calls_end_before_expiry(self) -> Settings:
        # A holder calls members until a member timeout short of expiry (`LeaseHolder.valid_until`), so that its last
        # call has ended when another replica may take over; that window must outlast two renew periods.
        if self.member_timeout + 2 * self.lease_renew_period > self.lease_duration:
            raise ValueError(f"ARCHIPELAGO_MEMBER_TIMEOUT ({self.member_timeout:g} s) plus twice "
                             f"ARCHIPELAGO_LEASE_RENEW_PERIOD ({self.lease_renew_period:g} s) must be at most "
                             f"ARCHIPELAGO_LEASE_DURATION ({self.lease_duration:g} s): a replica stops calling members "
                             "a member timeout before its leases can expire")
        return self

    @model_validator(mode="after")
    def _certificate_with_its_key(self) -> Settings:
        if (self.tls_certfile is None) != (self.tls_keyfile is None):
            raise ValueError("set ARCHIPELAGO_TLS_CERTFILE and ARCHIPELAGO_TLS_KEYFILE together, or neither")
        return self

    @property
    def is_sqlite(self) -> bool:
        return make_url(self.database_url).get_backend_name() == "sqlite"

    @property
    def sqlite_path(self) -> Path | None:
        """The database file of an SQLite URL, or None for memory or another backend."""
        if not self.is_sqlite:
            return None
        database = make_url(self.database_url).database
        return Path(database) if database and database != ":memory:" else None

    @property
    def data_dir(self) -> Path:
        """Where the broker keeps its own files (a self-signed TLS certificate): beside an SQLite file, else
        ./archipelago-data."""
        path = self.sqlite_path
        return path.resolve().parent if path is not None else Path("archipelago-data").resolve()

    def fernet_key(self) -> bytes:
        """The key that encrypts kubeconfigs at rest.

        An SQLite file (the embedded default) gets a generated key in a 0600 file beside it, so the
        demo needs no setup; any other database must be given ARCHIPELAGO_SECRET_KEY explicitly.
        """
        if self.secret_key:
            return _check_fernet_key(self.secret_key.encode())
        path = self.sqlite_path
        if not self.is_sqlite:
            raise ConfigError("ARCHIPELAGO_SECRET_KEY is not set; a non-SQLite database needs one "
                              "(generate it with: archipelago secret generate)")
        if path is None:  # in-memory SQLite: nothing to keep the key beside
            return Fernet.generate_key()
        key_file = path.resolve().parent / SECRET_FILE_NAME
        if not key_file.exists():
            key_file.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                handle.write(Fernet.generate_key())
        return _check_fernet_key(key_file.read_bytes().strip())


def _check_fernet_key(key: bytes) -> bytes:
    try:
        Fernet(key)
    except ValueError:
        raise ConfigError("ARCHIPELAGO_SECRET_KEY is not a Fernet key (32 url-safe base64-encoded bytes); "
                          "generate one with: archipelago secret generate") from None
    return key


def new_token() -> str:
    return secrets.token_urlsafe(32)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings; tests call `get_settings.cache_clear()` after changing the environment."""
    try:
        return Settings()
    except ValueError as exc:  # pydantic's ValidationError: keep only our message
        errors = getattr(exc, "errors", lambda: [])()
        message = "; ".join(_setting_error(e) for e in errors) or str(exc)
        raise ConfigError(message) from None


def _setting_error(error: dict) -> str:
    """`ARCHIPELAGO_PORT: Input should be a valid integer …`, or our own message, which names it already."""
    if "error" in error.get("ctx", {}):
        return str(error["ctx"]["error"])
    name = "ARCHIPELAGO_" + str(error["loc"][0]).upper() if error.get("loc") else "a setting"
    return f"{name}: {error.get('msg')} (got {error.get('input')!r})"
