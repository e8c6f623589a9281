"""The one reader of the environment: every setting of Ablate, prefixed ``ABLATE_``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ablate.backend.domain.statistics import (
    ALPHA,
    LOOKBACK_MIN_HISTORY,
    LOOKBACK_RELEASES,
    NOISY_CV,
    THRESHOLD_PCT,
)


def default_data_dir() -> Path:
    return Path(platformdirs.user_data_dir("ablate", appauthor=False))


@dataclass(frozen=True)
class BackoffPolicy:
    """A wait between attempts that doubles from ``first_s`` up to ``max_s``: one rule for a run's
    retries and a webhook's deliveries, each with its own pair of settings."""

    first_s: float
    max_s: float

    def delay_s(self, attempt: int) -> float:
        """The wait after failed attempt ``attempt`` (1-based), before the next one."""
        return min(self.max_s, self.first_s * 2.0 ** max(0, attempt - 1))


class Settings(BaseSettings):
    """Ablate's configuration. Each field is read from ``ABLATE_<NAME>``."""

    model_config = SettingsConfigDict(env_prefix="ABLATE_", extra="ignore")

    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Where the embedded database, run logs and reports live.",
    )
    database_url: str = Field(
        default="",
        description="SQLAlchemy URL. Empty: a SQLite file `ablate.sqlite` in the data directory. "
        "Production: `postgresql+psycopg://user@host/db`.",
    )
    ray_address: str = Field(
        default="",
        description="Ray cluster to join (`auto`, `host:port` or `ray://host:port`). Empty: start a local "
        "Ray of this process's own, even when another Ray runs on the machine (join that one with `auto`). "
        "A cluster whose `ray_address` names the same Ray cluster, written any of these ways, is served "
        "by this dispatcher.",
    )
    ray_auth_token: SecretStr = Field(
        default=SecretStr(""),
        description="The token of a Ray cluster with token authentication (Ray 2.60 turns it on when the "
        "head has `~/.ray/auth_token` or `RAY_AUTH_MODE=token`; `ray get-auth-token` on the head prints "
        "it). Set: the dispatcher joins `ABLATE_RAY_ADDRESS` with it (Ray's own `RAY_AUTH_MODE=token`, "
        "`RAY_AUTH_TOKEN`). Give this or `ABLATE_RAY_AUTH_TOKEN_FILE`, not both. Never logged.",
    )
    ray_auth_token_file: Path | None = Field(
        default=None,
        description="A file holding that token (a copy of the head's `~/.ray/auth_token`, or a mounted "
        "secret); read when the dispatcher joins Ray.",
    )
    ray_num_cpus: int | None = Field(
        default=None, description="CPUs of the local Ray instance (empty: all cores of this machine)."
    )
    host: str = Field(default="127.0.0.1", description="Address `ablate serve` binds to.")
    port: int = Field(default=8000, description="Port `ablate serve` listens on.")
    read_requires_token: bool = Field(
        default=False,
        description="When true, every read needs a token (read scope): the API, report export, the "
        "OpenAPI document and `/docs`, and the dashboard (browsers sign in once at `/login`).",
    )
    metrics_requires_token: bool = Field(
        default=False, description="When true, `/metrics` needs a token (any scope) as a bearer header."
    )
    max_body_bytes: int = Field(
        default=16 * 1024 * 1024, description="Request bodies above this size get 413 before parsing."
    )
    max_url_bytes: int = Field(
        default=32 * 1024,
        ge=1024,
        description="Request lines (method, path and query) above this size get 414, read no further.",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Request headers above this size in all get 431, read no further.",
    )
    dispatcher_poll_s: float = Field(default=1.0, description="How often an idle dispatcher looks for runs.")
    lease_s: float = Field(
        default=30.0, description="A claimed run whose lease is not renewed within this time is queued again."
    )
    max_attempts: int = Field(
        default=3, description="Attempts for a run that fails for infrastructure reasons (not the benchmark)."
    )
    retry_backoff_s: float = Field(
        default=5.0,
        ge=0,
        description="Wait before the second attempt of a run that failed for infrastructure reasons, "
        "doubling for each later attempt (a full or read-only disk may clear meanwhile). 0: at once.",
    )
    retry_backoff_max_s: float = Field(
        default=60.0, gt=0, description="Longest wait between two attempts of one run."
    )
    run_timeout_s: float = Field(default=3600.0, description="Default wall-clock limit of one run.")
    placement_timeout_s: float = Field(
        default=60.0,
        ge=0,
        description="How long a claimed run may wait for Ray to place it (its placement group, or its "
        "node task to start, which gets 30 s more for its worker to start) before it fails naming the "
        "missing resource, so the rest of the queue keeps moving. 0: wait up to the run's timeout.",
    )
    preflight: Literal["strict", "lenient", "off"] = Field(
        default="lenient",
        description="Preflight on each node before a run: `strict` fails a node whose device tool "
        "(`nvidia-smi`, `ppu-smi`) is missing or fails; `lenient` fails it only when the tool fails and "
        "records a missing tool as unverified; `off` skips the check.",
    )
    max_concurrent_runs: int = Field(default=1, description="Runs one dispatcher executes at the same time.")
    wait_deadline_s: float = Field(
        default=1800.0,
        ge=0,
        description="How long a queued run may wait for devices with nothing progressing (no live run "
        "holds what it waits on: a node gone, devices not yet confirmed free) before it fails naming "
        "why. Waiting behind live runs of its pool never fails. 0: wait forever.",
    )
    device_release_grace_s: float = Field(
        default=900.0,
        ge=0,
        description="Devices of an attempt whose dispatcher stopped renewing them are given to other "
        "runs once that attempt's processes on the node are confirmed gone; on a node Ray reports dead "
        "(nobody left to confirm) only after this grace past the lease's expiry.",
    )
    noisy_cv: float = Field(
        default=NOISY_CV, description="Coefficient of variation above which a result is noisy."
    )
    regression_threshold: float = Field(
        default=THRESHOLD_PCT / 100,
        description="Relative change a release-over-release verdict needs (0.03 = 3%).",
    )
    significance_alpha: float = Field(default=ALPHA, description="Significance level of every test.")
    lookback_releases: int = Field(
        default=LOOKBACK_RELEASES,
        description="Earlier releases the lookback prediction interval compares against (K).",
    )
    lookback_min_history: int = Field(
        default=LOOKBACK_MIN_HISTORY,
        ge=2,
        description="Earlier releases with data the lookback needs before it gives a verdict.",
    )
    comparison_cache_runs: int = Field(
        default=150_000,
        ge=0,
        description="Size of each process's cache of built release comparisons (and, apart, of the "
        "release verdicts cell histories read), in runs plus deltas "
        "(a comparison weighs the runs of its release and baseline plus its cell/metric deltas; about "
        "3 kB each with its JSON text: a 10,000-cell release of 5 repeats is 120,000); least recently "
        "used out first; 0: none kept. A kept comparison is reused only while no write has changed what "
        "it read.",
    )
    log_level: str = Field(default="info", description="Log level of the service.")
    server_url: str = Field(
        default="http://127.0.0.1:8000",
        description="Ablate server that `ablate results submit` talks to (overridden by `--server`).",
    )
    token: SecretStr = Field(
        default=SecretStr(""),
        description="API token `ablate results submit` sends (overridden by `--token`). Never logged.",
    )

    public_url: str = Field(
        default="",
        description="The dashboard's address as its users reach it, e.g. `https://ablate.example.com`: "
        "webhook payloads link to studies and releases under it. Empty: payloads carry paths only.",
    )
    webhooks: bool = Field(
        default=True,
        description="Run the webhook delivery worker in this API process (`ablate serve`, compose's "
        "api). Several API processes share the outbox safely.",
    )
    webhook_allow_private: bool = Field(
        default=False,
        description="Let webhooks target private, loopback, link-local and cloud-metadata addresses "
        "(refused by default, when a webhook is created and again at each delivery).",
    )
    webhook_max_attempts: int = Field(
        default=8, ge=1, le=100, description="Attempts of one webhook delivery before it is marked failed."
    )
    webhook_backoff_s: float = Field(
        default=10.0,
        gt=0,
        description="Wait before a failed delivery's second attempt; it doubles at each further "
        "attempt, up to `webhook_max_backoff_s`.",
    )
    webhook_max_backoff_s: float = Field(
        default=3600.0, gt=0, description="Longest wait between two attempts of one delivery."
    )
    webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="How long one delivery attempt waits for the receiver's answer."
    )
    webhook_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="A delivery claimed by a worker that stops answering (a killed server) is sent "
        "again, under the same delivery id, once this lease passes. More than `webhook_timeout_s`.",
    )
    webhook_poll_s: float = Field(
        default=1.0, gt=0, description="How often the delivery worker looks for due deliveries."
    )

    @field_validator("database_url")
    @classmethod
    def _strip(cls, value: str) -> str:
        return value.strip()

    @model_validator(mode="after")
    def _lease_outlasts_timeout(self) -> Settings:
        # A lease that ends before the receiver may answer would let a second worker send it too.
        if self.webhook_lease_s <= self.webhook_timeout_s:
            raise ValueError(
                f"webhook_lease_s ({self.webhook_lease_s:g}) must be more than webhook_timeout_s "
                f"({self.webhook_timeout_s:g})"
            )
        return self

    @property
    def retry_backoff(self) -> BackoffPolicy:
        """Between attempts of a run that failed for infrastructure reasons."""
        return BackoffPolicy(self.retry_backoff_s, self.retry_backoff_max_s)

    @property
    def webhook_backoff(self) -> BackoffPolicy:
        """Between attempts of one webhook delivery."""
        return BackoffPolicy(self.webhook_backoff_s, self.webhook_max_backoff_s)

    @property
    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'ablate.sqlite'}"

    @property
    def log_dir(self) -> Path:
        return self.data_dir / "logs"

    @property
    def is_embedded_sqlite(self) -> bool:
        return self.resolved_database_url.startswith("sqlite")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


class CiEnvironment(BaseSettings):
    """The variables a CI system sets for its jobs (GitHub Actions, GitLab CI, Jenkins, Buildkite).

    Not settings of Ablate (no prefix, not in the configuration reference): `ablate ci` reads them
    for a result's provenance and for the job summary. Every field is the variable of its name in
    upper case; empty when unset.
    """

    model_config = SettingsConfigDict(extra="ignore", case_sensitive=False)

    # GitHub Actions
    github_actions: str = ""
    github_run_id: str = ""
    github_run_attempt: str = ""
    github_sha: str = ""
    github_ref_name: str = ""
    github_head_ref: str = ""
    github_server_url: str = ""
    github_repository: str = ""
    github_job: str = ""
    github_workflow: str = ""
    github_step_summary: str = ""
    # GitLab CI
    gitlab_ci: str = ""
    ci_pipeline_id: str = ""
    ci_job_id: str = ""
    ci_commit_sha: str = ""
    ci_commit_ref_name: str = ""
    ci_job_url: str = ""
    ci_job_name: str = ""
    ci_project_path: str = ""
    # Jenkins
    jenkins_url: str = ""
    build_number: str = ""
    build_url: str = ""
    job_name: str = ""
    git_commit: str = ""
    git_branch: str = ""
    branch_name: str = ""
    # Buildkite
    buildkite: str = ""
    buildkite_build_id: str = ""
    buildkite_build_number: str = ""
    buildkite_retry_count: str = ""
    buildkite_commit: str = ""
    buildkite_branch: str = ""
    buildkite_build_url: str = ""
    buildkite_job_id: str = ""
    buildkite_label: str = ""
    buildkite_pipeline_slug: str = ""
