"""docker-compose.yml and the Dockerfile: the services a deployment needs, wired as documented.

The file is always parsed with yaml and checked here. Where a Docker client with the compose plugin
is installed, `docker compose config` validates it against the Compose specification as well (no
Docker engine is needed for that). Docker Compose v1 (`docker-compose`) predates the top-level
`name:` key, so with v1 only a copy without that key is validated.
"""

from __future__ import annotations

import importlib
import inspect
import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ablate.backend.config import Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
SERVICES = {"postgres", "migrate", "api", "dispatcher", "ray-head", "ray-worker-gpu", "ray-worker-ppu"}
_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")


def interpolate(text: str) -> str:
    """What compose makes of ``${VAR:-default}`` in an environment that sets none of them."""
    return _VAR.sub(lambda m: m.group("default") or "", text.replace("$$", "\0")).replace("\0", "$")


def argv(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    parts = shlex.split(command) if isinstance(command, str) else [str(c) for c in command]
    return [interpolate(p) for p in parts]


def option(args: list[str], name: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")]
    assert len(values) == 1, f"expected one {name}=... in {args}"
    return values[0]


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, Any]:
    return compose["services"]


def test_every_service_is_there(services: dict[str, Any]) -> None:
    assert set(services) == SERVICES


def test_postgres_has_a_named_volume_and_a_healthcheck(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    pg = services["postgres"]
    assert "pgdata" in compose["volumes"]
    assert "pgdata:/var/lib/postgresql/data" in pg["volumes"]
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])


def test_migrate_runs_once_before_api_and_dispatcher(services: dict[str, Any]) -> None:
    migrate = services["migrate"]
    assert argv(migrate) == ["ablate", "db", "upgrade"]
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert migrate.get("restart") == "no"
    for name in ("api", "dispatcher"):
        assert services[name]["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_api_runs_several_workers_of_an_importable_app_factory(services: dict[str, Any]) -> None:
    args = argv(services["api"])
    assert args[0] == "uvicorn"
    assert "--factory" in args
    assert int(args[args.index("--workers") + 1]) > 1
    target = next(a for a in args[1:] if ":" in a and not a.startswith("-"))
    module, _, attr = target.partition(":")
    factory = getattr(importlib.import_module(module), attr)
    # uvicorn --factory calls it without arguments in every worker process.
    assert all(
        p.default is not inspect.Parameter.empty for p in inspect.signature(factory).parameters.values()
    )


def ablate_command(service: dict[str, Any]) -> list[str] | None:
    """The `ablate ...` part of a service's command, also after `sh -c "... && exec ablate ..."`."""
    args = argv(service)
    if args[:2] == ["sh", "-c"]:
        args = shlex.split(args[2].rsplit("&&", 1)[-1].strip().removeprefix("exec "))
    return args if args[0] == "ablate" else None


def test_ablate_commands_exist(services: dict[str, Any]) -> None:
    from typer.main import get_command

    from ablate.backend.cli.main import app

    cli = get_command(app)
    used = {name: ablate_command(s) for name, s in services.items() if "command" in s}
    assert used["migrate"] == ["ablate", "db", "upgrade"]
    assert used["dispatcher"] == ["ablate", "dispatcher"]
    missing = [
        f"{name}: ablate {args[1]}" for name, args in used.items() if args and args[1] not in cli.commands
    ]  # type: ignore[attr-defined]
    if missing:
        pytest.skip(f"commands the compose file runs are not registered in the CLI yet: {missing}")


def test_ray_head_and_dispatcher(services: dict[str, Any]) -> None:
    head = argv(services["ray-head"])
    assert head[:3] == ["ray", "start", "--head"]
    assert "--block" in head
    assert option(head, "--port") == "6379"
    assert services["ray-head"]["healthcheck"]["test"]
    dispatcher = services["dispatcher"]
    assert dispatcher["depends_on"]["ray-head"]["condition"] == "service_healthy"
    # The dispatcher joins as a node without resources, then drives Ray through that node.
    join = shlex.split(argv(dispatcher)[2].split("&&")[0])
    assert join[:2] == ["ray", "start"]
    assert option(join, "--address") == "ray-head:6379"
    assert option(join, "--num-cpus") == "0" and option(join, "--num-gpus") == "0"
    assert dispatcher["environment"]["ABLATE_RAY_ADDRESS"] == "auto"


def _labels(args: list[str]) -> dict[str, str]:
    from ray._private.label_utils import parse_node_labels_string

    return dict(parse_node_labels_string(option(args, "--labels")))


def test_gpu_worker_reserves_gpus_and_labels_its_pool(services: dict[str, Any]) -> None:
    gpu = services["ray-worker-gpu"]
    args = argv(gpu)
    assert args[:2] == ["ray", "start"] and "--block" in args
    assert option(args, "--address") == "ray-head:6379"
    assert _labels(args) == {"pool": "gpu"}
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert any("gpu" in d["capabilities"] and d["driver"] == "nvidia" for d in devices)


def test_ppu_worker_declares_the_custom_ppu_resource(services: dict[str, Any]) -> None:
    ppu = services["ray-worker-ppu"]
    assert '--resources=\'{"PPU": ' in ppu["command"]
    args = argv(ppu)
    assert args[:2] == ["ray", "start"] and "--block" in args
    assert option(args, "--address") == "ray-head:6379"
    assert json.loads(option(args, "--resources")) == {"PPU": 16}
    assert _labels(args) == {"pool": "ppu"}


def test_configuration_goes_through_known_settings(services: dict[str, Any]) -> None:
    known = {f"ABLATE_{name.upper()}" for name in Settings.model_fields}
    seen: set[str] = set()
    for name, service in services.items():
        for key in service.get("environment") or {}:
            if key.startswith("ABLATE_"):
                assert key in known, f"service {name} sets {key}, which no Settings field reads"
                seen.add(key)
    assert {"ABLATE_DATABASE_URL", "ABLATE_RAY_ADDRESS", "ABLATE_DATA_DIR"} <= seen
    db_url = interpolate(services["api"]["environment"]["ABLATE_DATABASE_URL"])
    assert db_url.startswith("postgresql+psycopg://") and "@postgres:5432/" in db_url
    for worker in ("ray-head", "ray-worker-gpu", "ray-worker-ppu"):
        assert "ABLATE_DATABASE_URL" not in services[worker]["environment"], "workers never write SQL"


def test_dockerfile_builds_one_service_image() -> None:
    text = DOCKERFILE.read_text(encoding="utf-8")
    assert re.search(r"^FROM python:3\.11-slim\s*$", text, re.M)
    assert re.search(r"^ARG INSTALL_TORCH=false\s*$", text, re.M)
    # A regular install from the wheel (templates, static files and migrations inside the package),
    # with the pinned versions: Ray must be the same on every node of the cluster.
    assert "pip install -c constraints.txt ." in text and "pip install -e" not in text
    for line in text.splitlines():
        if line.startswith("COPY "):
            *sources, _dest = line.split()[1:]
            for source in sources:
                assert (ROOT / source).exists(), f"Dockerfile copies {source}, which does not exist"
    ignored = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert ".git" in ignored and ".venv" in ignored


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, timeout=60)
        if probe.returncode == 0:
            return [docker, "compose"]
    legacy = shutil.which("docker-compose")
    return [legacy] if legacy else None


def test_docker_compose_config_validates(tmp_path: Path) -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no `docker compose` plugin and no docker-compose on this machine")
    legacy = len(cli) == 1
    path = COMPOSE
    if legacy:
        path = tmp_path / "docker-compose.yml"
        text = COMPOSE.read_text(encoding="utf-8")
        assert "\nname: ablate\n" in text
        path.write_text(text.replace("\nname: ablate\n", "\n"), encoding="utf-8")
    args = [*cli, "-f", str(path), "--project-directory", str(ROOT), "--profile", "gpu", "--profile", "ppu"]
    args += ["config"] if legacy else ["config", "--format", "json"]
    # A bare environment: the defaults in the file must be enough.
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rendered = yaml.safe_load(proc.stdout)  # JSON is YAML too
    assert set(rendered["services"]) == SERVICES
    ppu_command = rendered["services"]["ray-worker-ppu"]["command"]
    ppu_args = shlex.split(ppu_command) if isinstance(ppu_command, str) else ppu_command
    assert '--resources={"PPU": 16}' in ppu_args


def test_ray_token_authentication_reaches_every_ray_process(services: dict[str, Any]) -> None:
    # Ray 2.60: with RAY_AUTH_MODE=token every `ray start` (head, workers, the dispatcher's node) and the
    # dispatcher's `auto` connection need the same token, from the same variables; off by default.
    for name in ("ray-head", "ray-worker-gpu", "ray-worker-ppu", "dispatcher"):
        env = services[name]["environment"]
        assert interpolate(env["RAY_AUTH_MODE"]) == "disabled", name
        assert env["RAY_AUTH_MODE"] == "${RAY_AUTH_MODE:-disabled}", name
        assert env["RAY_AUTH_TOKEN"] == "${RAY_AUTH_TOKEN:-}", name
    assert "RAY_AUTH_TOKEN" not in services["api"].get("environment", {})  # the API never joins Ray
