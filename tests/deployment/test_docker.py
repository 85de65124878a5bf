"""docker/: what can be checked without a Docker engine (issue 7, item 5).

None runs here (and `docker compose` is not installed), so these tests read
the files: the Dockerfile's entry is the installed `staal-supervisor serve`
on the manifest the compose file mounts; every path it copies exists and
gets into the build context; it builds what pyproject.toml needs (the C step
counter included) and installs the project the way the README's first
command does (the same package, the same extras); it runs as a non-root
user with /var/lib/staal as the journals volume. The compose file is parsed
(a small YAML subset reader, cross-checked against PyYAML when that happens
to be installed) and its services, mounts, network and key agree with each
other, with the image and with examples/manifest.json.
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from fnmatch import fnmatch
from importlib.metadata import entry_points
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]
DOCKER = ROOT / "docker"
DOCKERFILE = DOCKER / "Dockerfile"
IGNORE = DOCKER / "Dockerfile.dockerignore"  # BuildKit's per-Dockerfile ignore file
COMPOSE = DOCKER / "compose.yaml"
ENTRY = ["staal-supervisor", "serve", "/etc/staal/manifest.json"]
JOURNALS_VOLUME = "/var/lib/staal"
BASE = "python:3.11-slim"


# -- reading a Dockerfile -------------------------------------------------------


@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction]

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def commands(self) -> list[list[str]]:
        """Every shell command of every RUN, split on && and into words."""
        commands = []
        for run in self.all("RUN"):
            for part in run.args.split("&&"):
                words = shlex.split(part, comments=False)
                if words:
                    commands.append(words)
        return commands


def read_dockerfile(text: str) -> list[Stage]:
    logical: list[str] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment inside a continued instruction
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    stages: list[Stage] = []
    for line in logical:
        keyword, _, args = line.strip().partition(" ")
        keyword = keyword.upper()
        args = args.strip()
        if keyword == "FROM":
            words = args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else None
            stages.append(Stage(words[0], name, []))
            continue
        assert stages, f"{keyword} before any FROM"
        stages[-1].instructions.append(Instruction(keyword, args))
    return stages


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    return read_dockerfile(DOCKERFILE.read_text())


@pytest.fixture(scope="module")
def runtime(stages) -> Stage:
    return stages[-1]


@pytest.fixture(scope="module")
def build(stages) -> Stage:
    (stage,) = [s for s in stages[:-1] if s.name == "build"]
    return stage


def exec_form(instruction: Instruction) -> list[str]:
    value = json.loads(instruction.args)
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), \
        f"{instruction.keyword} must be in exec (JSON) form: {instruction.args}"
    return value


def copies(stage: Stage) -> list[tuple[list[str], str, str | None]]:
    """(sources, destination, --from stage) for each COPY."""
    found = []
    for copy in stage.all("COPY"):
        words = shlex.split(copy.args)
        flags = {w.split("=", 1)[0]: w.split("=", 1)[1] for w in words if w.startswith("--")}
        paths = [w for w in words if not w.startswith("--")]
        found.append((paths[:-1], paths[-1], flags.get("--from")))
    return found


# -- the install step the README gives -----------------------------------------


SPEC = re.compile(r"^(?P<target>[^\[\]]+)(?:\[(?P<extras>[^\]]*)\])?$")


def requirement(spec: str) -> tuple[str, frozenset[str]]:
    match = SPEC.match(spec)
    assert match, f"not a requirement: {spec}"
    extras = match["extras"] or ""
    return match["target"], frozenset(e.strip() for e in extras.split(",") if e.strip())


def pip_targets(words: list[str]) -> list[str]:
    """The requirement arguments of a `pip install` / `pip wheel` command."""
    takes_value = {"--wheel-dir", "-w", "--find-links", "-f", "--index-url", "-i", "-r",
                   "--requirement", "-c", "--constraint"}
    targets, skip = [], False
    for word in words[2:]:
        if skip:
            skip = False
        elif word in takes_value:
            skip = True
        elif not word.startswith("-"):
            targets.append(word)
    return targets


def readme_install() -> tuple[str, frozenset[str], list[str]]:
    """The project and extras the README's first command installs (its first
    ```sh block, as .ci/run reads it)."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE)
    assert block, "README.md has no ```sh block"
    first = block[1].splitlines()[0]
    for part in first.split("&&"):
        words = shlex.split(part)
        if words[:2] == ["pip", "install"]:
            (target,) = pip_targets(words)
            return (*requirement(target), words)
    raise AssertionError(f"the README's first command installs nothing with pip: {first}")


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# -- the Dockerfile -------------------------------------------------------------------


def test_both_stages_are_slim_python_311(stages):
    assert len(stages) >= 2
    assert all(stage.base == BASE for stage in stages)


def test_the_entry_is_staal_supervisor_serve_on_the_mounted_manifest(runtime):
    (entrypoint,) = runtime.all("ENTRYPOINT")
    assert exec_form(entrypoint) == ENTRY
    assert runtime.all("CMD") == []  # nothing appended to the entry by default


def test_the_entry_command_exists_in_the_installed_package():
    (script,) = entry_points(group="console_scripts", name=ENTRY[0])
    assert script.value == pyproject()["project"]["scripts"][ENTRY[0]]
    module, _, function = script.value.partition(":")
    assert (module, function) == ("staal.supervisor.app.main", "main")
    assert callable(getattr(importlib.import_module(module), function))
    # The entry hands everything but a plain `serve` to the Typer app, where
    # `serve MANIFEST` is a command taking the manifest as its one argument.
    cli = importlib.import_module("staal.supervisor.app.cli")
    serve = typer.main.get_command(cli.app).commands[ENTRY[1]]
    arguments = [p.name for p in serve.params if p.param_type_name == "argument"]
    assert arguments == ["manifest"]
    done = subprocess.run([str(Path(sys.executable).parent / ENTRY[0]), ENTRY[1], "--help"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr


def test_every_path_copied_from_the_context_exists_and_is_not_ignored(stages):
    ignore = [line.strip() for line in IGNORE.read_text().splitlines()
              if line.strip() and not line.lstrip().startswith("#")]
    assert ignore[0] == "*", "the ignore file lets in only what it names"
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    copied = []
    for stage in stages:
        for sources, _, from_stage in copies(stage):
            if from_stage is None:
                copied += sources
    assert copied
    for source in copied:
        path = source.rstrip("/")
        assert (ROOT / path).exists(), f"COPY {source}: no such path in the project"
        assert path in allowed, f"COPY {source}: {IGNORE.name} keeps it out of the context"
    # A host build of the C extension or a cache never reaches the image.
    assert {"**/*.so", "**/__pycache__"} <= set(ignore)


def test_the_build_stage_gets_everything_the_wheel_is_built_from(build):
    project = pyproject()
    setuptools = project["tool"]["setuptools"]
    needed = {"pyproject.toml", project["project"]["readme"], *setuptools["package-dir"].values()}
    for extension in setuptools.get("ext-modules", []):
        needed.update(extension["sources"])
    copied = {source.rstrip("/") for sources, _, _ in copies(build) for source in sources}
    for path in needed:
        assert any(path == c or path.startswith(c + "/") for c in copied), \
            f"{path} is needed to build the wheel and the build stage does not copy it"


def test_the_build_stage_has_a_compiler_and_the_image_proves_the_c_extension_built(build, runtime):
    apt = [c for c in build.commands() if c[:2] == ["apt-get", "install"]]
    assert apt and "gcc" in apt[0]
    assert not [c for c in runtime.commands() if c[:2] == ["apt-get", "install"]]
    # The extension is optional to build: the image checks it is there.
    modules = [e["name"] for e in pyproject()["tool"]["setuptools"]["ext-modules"]]
    checks = " ".join(" ".join(c) for c in runtime.commands() if c[:2] == ["python", "-c"])
    for module in modules:
        assert f"import {module}" in checks


def test_the_image_installs_the_project_the_way_the_readme_does(build, runtime):
    target, extras, words = readme_install()
    assert target == "."  # the project itself, from its folder
    # The build stage makes wheels of exactly that: the project, the README's extras.
    wheels = [c for c in build.commands() if c[:2] == ["pip", "wheel"]]
    assert len(wheels) == 1
    assert [requirement(t) for t in pip_targets(wheels[0])] == [(target, extras)]
    wheel_dir = wheels[0][wheels[0].index("--wheel-dir") + 1]
    # The runtime stage installs the project by name, with the same extras,
    # from those wheels only.
    assert (([wheel_dir], wheel_dir, build.name) in copies(runtime)
            or ([wheel_dir], wheel_dir + "/", build.name) in copies(runtime))
    installs = [c for c in runtime.commands() if c[:2] == ["pip", "install"]]
    assert len(installs) == 1
    install = installs[0]
    name = pyproject()["project"]["name"]
    assert [requirement(t) for t in pip_targets(install)] == [(name, extras)]
    assert "--no-index" in install and install[install.index("--find-links") + 1] == wheel_dir
    # The README installs editable (-e) for development; the image installs a wheel.
    assert "-e" in words and "-e" not in install


def test_it_runs_as_a_user_of_its_own_with_the_journals_volume(runtime):
    (user,) = runtime.all("USER")
    name = user.args.split(":")[0]
    assert name not in ("root", "0")
    commands = runtime.commands()
    (useradd,) = [c for c in commands if c[0] == "useradd"]
    assert useradd[-1] == name and "--uid" in useradd and useradd[useradd.index("--uid") + 1] != "0"
    # USER comes after the steps that need root.
    keywords = [i.keyword for i in runtime.instructions]
    assert keywords.index("USER") > max(i for i, k in enumerate(keywords) if k == "RUN")
    (volume,) = runtime.all("VOLUME")
    assert JOURNALS_VOLUME in exec_form(volume)
    chowned = [c for c in commands if c[0] == "chown"]
    assert any(c[1].split(":")[0] == name and JOURNALS_VOLUME in c[2:] for c in chowned)


# -- reading the compose file -------------------------------------------------------


def _scalar(text: str) -> Any:
    text = text.strip()
    if text.startswith('"'):
        end = _closing_quote(text, '"')
        assert not text[end + 1:].strip() or text[end + 1:].strip().startswith("#"), text
        return json.loads(text[:end + 1])
    if text.startswith("'"):
        end = _closing_quote(text, "'")
        return text[1:end].replace("''", "'")
    text = re.split(r"\s#", text, maxsplit=1)[0].strip()
    if text.startswith("["):
        assert text.endswith("]"), f"a flow sequence on one line only: {text}"
        return [_scalar(item) for item in _split_flow(text[1:-1])]
    if text in ("true", "false"):
        return text == "true"
    if text in ("", "~", "null"):
        return None
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    assert not text.startswith(("{", "&", "*", "!", "|", ">")), f"outside the YAML subset: {text}"
    return text


def _closing_quote(text: str, quote: str) -> int:
    i = 1
    while i < len(text):
        if quote == '"' and text[i] == "\\":
            i += 2
            continue
        if text[i] == quote:
            if quote == "'" and text[i + 1:i + 2] == "'":
                i += 2
                continue
            return i
        i += 1
    raise AssertionError(f"unterminated string: {text}")


def _split_flow(text: str) -> list[str]:
    items, current, quote = [], "", None
    for char in text:
        if quote:
            current += char
            if char == quote:
                quote = None
        elif char in "\"'":
            quote = char
            current += char
        elif char == ",":
            items.append(current)
            current = ""
        else:
            current += char
    if current.strip():
        items.append(current)
    return [item for item in items if item.strip()]


def _key_value(content: str) -> tuple[str, str] | None:
    match = re.match(r'^("[^"]*"|[^\s"\'#][^:#]*?)\s*:(?:\s+(.*)|$)', content)
    if not match:
        return None
    key = match[1]
    return (json.loads(key) if key.startswith('"') else key), (match[2] or "")


def read_yaml(text: str) -> Any:
    """The YAML subset compose files here are written in: block mappings and
    sequences, plain and quoted scalars, one-line flow sequences, comments."""
    lines = []
    for raw in text.splitlines():
        assert "\t" not in raw[:len(raw) - len(raw.lstrip())], "tabs do not indent YAML"
        stripped = raw.strip()
        if stripped and not stripped.startswith("#"):
            lines.append((len(raw) - len(raw.lstrip(" ")), stripped))

    def block(i: int, indent: int) -> tuple[Any, int]:
        if lines[i][1].startswith("- ") or lines[i][1] == "-":
            items = []
            while i < len(lines) and lines[i][0] == indent and lines[i][1].startswith("-"):
                rest = lines[i][1][1:].strip()
                assert _key_value(rest) is None or rest.startswith(("[", '"', "'")), \
                    f"a mapping inside a sequence is outside the subset: {rest}"
                items.append(_scalar(rest))
                i += 1
            return items, i
        mapping: dict[str, Any] = {}
        while i < len(lines) and lines[i][0] == indent:
            pair = _key_value(lines[i][1])
            assert pair is not None, f"not a mapping entry: {lines[i][1]}"
            key, rest = pair
            assert key not in mapping, f"{key} twice"
            i += 1
            if rest.strip() and not rest.strip().startswith("#"):
                mapping[key] = _scalar(rest)
            elif i < len(lines) and (lines[i][0] > indent or
                                     (lines[i][0] == indent and lines[i][1].startswith("-"))):
                mapping[key], i = block(i, lines[i][0])
            else:
                mapping[key] = None
        return mapping, i

    value, end = block(0, lines[0][0])
    assert end == len(lines), f"could not read past: {lines[end][1]}"
    return value


def test_the_yaml_reader_reads_the_subset():
    text = ('a:\n  b: "x: #y" # c\n  c: [1, "two, three", four]\n  d:\n    - e\n'
            "    - 'f'\n  g:\nh: true\n")
    assert read_yaml(text) == {"a": {"b": "x: #y", "c": [1, "two, three", "four"],
                                     "d": ["e", "f"], "g": None}, "h": True}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return read_yaml(COMPOSE.read_text())


def test_the_compose_file_parses_the_same_as_with_pyyaml_when_it_is_installed(compose):
    try:
        import yaml
    except ImportError:
        return  # not a dependency; the subset reader above is the check
    assert yaml.safe_load(COMPOSE.read_text()) == compose


def mounts(service: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(source, target, options) of each short-syntax volume."""
    found = []
    for entry in service.get("volumes", []):
        source, target, *options = entry.split(":")
        found.append((source, target, ":".join(options)))
    return found


def examples_manifest() -> dict[str, Any]:
    return json.loads((ROOT / "examples" / "manifest.json").read_text())


def test_it_names_only_services_and_volumes_that_exist(compose):
    assert set(compose) <= {"name", "services", "volumes", "networks"}
    services = compose["services"]
    assert set(services) == {"staal", "payments"}
    named_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        for dependency in service.get("depends_on", []):
            assert dependency in services and dependency != name
        mode = service.get("network_mode", "")
        if mode.startswith("service:"):
            assert mode.removeprefix("service:") in service.get("depends_on", [])
        for source, _, _ in mounts(service):
            if source.startswith("."):
                assert (DOCKER / source).resolve().exists(), f"{name}: {source} does not exist"
            else:
                assert source in named_volumes, f"{name}: volume {source} is not declared"
        if "build" in service:
            context = (DOCKER / service["build"]["context"]).resolve()
            assert context == ROOT
            assert (context / service["build"]["dockerfile"]).resolve() == DOCKERFILE


def test_staal_is_the_image_on_stdio_with_the_examples_as_etc_staal(compose):
    staal = compose["services"]["staal"]
    assert staal["stdin_open"] is True and staal.get("tty", False) is False  # docker run -i
    assert "entrypoint" not in staal and "command" not in staal  # the image's own entry
    binds = {target: (DOCKER / source).resolve() for source, target, _ in mounts(staal)
             if source.startswith(".")}
    manifest = PurePosixPath(ENTRY[2])
    assert binds[str(manifest.parent)] == ROOT / "examples"
    assert (ROOT / "examples" / manifest.name).is_file()
    # The journals (relative to the manifest's folder) land in the journals
    # volume, which is also mounted at the image's /var/lib/staal.
    journals = manifest.parent / examples_manifest()["server"]["journals"]
    volume_targets = {target: source for source, target, _ in mounts(staal)
                      if not source.startswith(".")}
    assert str(journals) in volume_targets
    assert volume_targets.get(JOURNALS_VOLUME) == volume_targets[str(journals)]


def test_the_payment_service_is_where_the_example_manifest_looks_for_it(compose):
    payments = compose["services"]["payments"]
    command = payments["entrypoint"]
    assert command[:2] == ["python", "examples/fake_payments.py"]
    workdir = PurePosixPath(payments["working_dir"])
    binds = {target: (DOCKER / source).resolve() for source, target, _ in mounts(payments)}
    assert binds[str(workdir / "examples")] == ROOT / "examples"
    assert (ROOT / "examples" / "fake_payments.py").is_file()
    option = dict(zip(command[2::2], command[3::2], strict=True))
    refund = next(t for t in examples_manifest()["tools"] if t["name"] == "refund_order")
    url = urlsplit(refund["grants"]["pay"]["base_url"])
    assert (option["--host"], int(option["--port"])) == (url.hostname, url.port)
    # staal shares its network namespace, so 127.0.0.1 is the payment service.
    assert compose["services"]["staal"]["network_mode"] == "service:payments"
    # Both sides get the same key: the variable the refund grant names.
    variable = refund["grants"]["pay"]["needs"]["key"]["env"]
    assert compose["services"]["staal"]["environment"][variable] == option["--key"]


def test_what_the_build_stage_copies_is_enough_to_build_the_wheel_with_its_c_extension(
        build, tmp_path):
    """The build stage's `pip wheel`, without the network: from only the
    paths it copies (less what the ignore file keeps out), the project's
    wheel builds and holds the compiled step counter and the console scripts."""
    ignored = [line.strip()[3:] for line in IGNORE.read_text().splitlines()
               if line.strip().startswith("**/")]
    context = tmp_path / "context"
    for sources, destination, from_stage in copies(build):
        assert from_stage is None and destination.endswith("/")
        into = context / destination  # relative to WORKDIR, the build's context copy
        for source in sources:
            origin = ROOT / source
            # COPY puts a file into the folder, and a folder's contents into it.
            pairs = ([(origin, into / origin.name)] if origin.is_file() else
                     [(path, into / path.relative_to(origin)) for path in origin.rglob("*")])
            for path, out in pairs:
                parts = path.relative_to(ROOT).parts
                if path.is_dir() or any(fnmatch(p, g) for p in parts for g in ignored):
                    continue
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, out)
    assert not list(context.rglob("*.so"))
    wheels = tmp_path / "wheels"
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-index",
                           "--no-build-isolation", "--wheel-dir", str(wheels), str(context)],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    (wheel,) = wheels.glob("staal-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        extension = [n for n in names if re.fullmatch(r"staal/worker/_steps\..*\.so", n)]
        assert extension, "the C step counter was not compiled into the wheel"
        (entry,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert f"{ENTRY[0]} = staal.supervisor.app.main:main" in archive.read(entry).decode()
