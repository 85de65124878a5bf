"""The start-up check of every tool (seed 000 section 2): each program is
checked and each tool's config validated with placeholder inputs, in a
worker, since the supervisor never imports operator code. `serve` runs it
before answering anything; `staal-supervisor check` runs the same check and
reports the same problems, so a manifest `check` calls valid is one `serve`
starts on. So it is for the operator's verifier (`auth.credential`
"provider"): loaded in its own process, or refused naming its key."""

from __future__ import annotations

import shutil

from staal.errors import StaalError
from staal.manifest.model import Manifest
from staal.supervisor.auth.verifier import ProviderAuthenticator, VerifierRefused
from staal.supervisor.calls.resources import entry_problems
from staal.supervisor.calls.tool_runtime import ToolRuntime, worst_case
from staal.supervisor.workers.pool import Pool
from staal.supervisor.workers.zygote import runtime_dir, worker_environment


async def check_tools(manifest: Manifest, pool: Pool) -> tuple[dict[str, ToolRuntime], list[str]]:
    """Each tool's runtime (its inputs' type description and schema) and
    every problem found, each naming its tool."""
    tools: dict[str, ToolRuntime] = {}
    problems: list[str] = []
    for tool in manifest.tools:
        checked = await pool.check(tool.name)
        if not checked.ok:
            problems.extend(f"tools '{tool.name}': {p}" for p in checked.problems)
            continue
        names = {item["name"] for item in checked.inputs["inputs"]}
        strangers = [name for name in (tool.once.by if tool.once else ()) if name not in names]
        if strangers:
            problems.append(f"tools '{tool.name}': once.by names {', '.join(strangers)}, "
                            f"which {'is' if len(strangers) == 1 else 'are'} not an input of "
                            f"its program (inputs: {', '.join(sorted(names)) or 'none'})")
            continue
        tools[tool.name] = ToolRuntime(tool, checked.inputs, checked.schema, worst_case(tool))
    return tools, problems


async def check_manifest(manifest: Manifest) -> list[str]:
    """What `serve` would refuse at start about the tools (and the
    verifier), found in a pool of its own that is gone again when this returns."""
    directory = runtime_dir()
    pool = Pool(manifest.path, directory, worker_environment(manifest), ahead=1)
    try:
        await pool.start()
        tools, problems = await check_tools(manifest, pool)
        problems += entry_problems(manifest.resources,
                                   {name: t.inputs for name, t in tools.items()})
    except StaalError as exc:  # the zygote could not start: a program that crashes on import
        problems = [exc.message]
    finally:
        await pool.close()
        shutil.rmtree(directory, ignore_errors=True)
    return problems + await verifier_problems(manifest)


async def verifier_problems(manifest: Manifest) -> list[str]:
    """Whether the operator's verifier (`auth.credential` "provider") loads,
    started as `serve` starts it and stopped again."""
    if manifest.auth is None or manifest.auth.credential.presence != "provider":
        return []
    authenticator = ProviderAuthenticator(manifest, lambda *_, **__: None)
    try:
        await authenticator.start()
    except VerifierRefused as exc:
        return [exc.message]
    await authenticator.close()
    return []
