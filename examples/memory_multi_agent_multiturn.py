"""Two agents in one sandbox, each with its own memory layout and a multi-turn conversation.

A GTM analyst and an engineering agent share one workspace. Isolation is by layout, not by
agent name: the analyst's memory lives in ``memories/gtm`` + ``sessions/gtm``, the engineer's in
``memories/engineering`` + ``sessions/engineering``. Each conversation is an ``SQLiteSession``:
its runs append to one rollout file (named after ``session_id``) and are distilled together
when the sandbox session stops.

    python examples/memory_multi_agent_multiturn.py --offline
    python examples/memory_multi_agent_multiturn.py --model gpt-5.4-mini
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from _support import parse_args, scripted_gtm_analyst, tree

from sandmem import (
    File,
    Filesystem,
    Manifest,
    Memory,
    MemoryGenerateConfig,
    MemoryLayoutConfig,
    RunConfig,
    Runner,
    SandboxAgent,
    SandboxRunConfig,
    Shell,
    SQLiteSession,
    UnixLocalSandboxClient,
)
from sandmem.demo import FIX_TASK, command_env, invoice_workspace, scripted_engineer

LEADS = """\
company,segment,employees,region,stage,score
Northwind Bank,fintech,450,EU,demo,88
Ledgerly,fintech,120,US,trial,91
PayPath,fintech,300,EU,trial,84
TallyHo,fintech,40,APAC,lead,73
Clinica Uno,healthcare,800,LATAM,lead,55
MedAxis,healthcare,1500,US,demo,62
ShopGrid,retail,90,US,lead,47
Cartwise,retail,60,EU,lead,52
"""


def generate_config(
    offline: bool, model: str | None, extra_prompt: str | None = None
) -> MemoryGenerateConfig:
    if offline:
        model = "extractive"  # the deterministic engine: no model call
    if model:
        return MemoryGenerateConfig(
            phase_one_model=model, phase_two_model=model, extra_prompt=extra_prompt
        )
    return MemoryGenerateConfig(extra_prompt=extra_prompt)


def layout(name: str) -> MemoryLayoutConfig:
    return MemoryLayoutConfig(memories_dir=f"memories/{name}", sessions_dir=f"sessions/{name}")


async def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    gtm_agent = SandboxAgent(
        name="GTM analyst",
        instructions="Analyze GTM workspace data and write concise recommendations.",
        model=scripted_gtm_analyst() if args.offline else args.model,
        capabilities=[
            Memory(
                layout=layout("gtm"),
                generate=generate_config(
                    args.offline,
                    args.model,
                    extra_prompt="Remember customer segments and what made them buy.",
                ),
            ),
            Filesystem(),
            Shell(),
        ],
    )
    engineering_agent = SandboxAgent(
        name="Engineering agent",
        instructions="Fix bugs in the acme-metrics package and keep its tests passing.",
        model=scripted_engineer() if args.offline else args.model,
        capabilities=[
            Memory(
                layout=layout("engineering"), generate=generate_config(args.offline, args.model)
            ),
            Filesystem(),
            Shell(),
        ],
    )
    # one conversation each: a session's runs append to the same rollout file
    gtm_conversation = SQLiteSession("gtm-q2-pipeline-review")
    engineering_conversation = SQLiteSession("eng-invoice-test-fix")

    manifest = Manifest(
        entries={**invoice_workspace().entries, "data/leads.csv": File(content=LEADS)}
    )
    client = UnixLocalSandboxClient(env=command_env())
    sandbox = await client.create(manifest=manifest)
    turns = [
        (
            gtm_agent,
            gtm_conversation,
            "Analyze data/leads.csv and identify one promising GTM segment.",
        ),
        (engineering_agent, engineering_conversation, FIX_TASK),
        (gtm_agent, gtm_conversation, "Using that analysis, write a short outreach hypothesis."),
        (
            engineering_agent,
            engineering_conversation,
            "Add a regression test for the bug you just fixed.",
        ),
    ]
    async with sandbox:
        run_config = RunConfig(sandbox=SandboxRunConfig(session=sandbox), workflow_name="GTM + eng")
        for agent, conversation, prompt in turns:
            result = await Runner.run(
                agent, prompt, session=conversation, run_config=run_config, max_turns=30
            )
            print(f"[{agent.name} · {conversation.session_id}] {prompt}\n{result.final_output}\n")
    # the session stopped: each layout's memory was generated from its own rollouts only

    root = sandbox.root
    for name in ("gtm", "engineering"):
        print(f"--- {name} memory ---")
        print(tree(root, f"sessions/{name}"))
        print(tree(root, f"memories/{name}"))
        print()
    gtm_text = (root / "memories/gtm/MEMORY.md").read_text()
    engineering_text = (root / "memories/engineering/MEMORY.md").read_text()
    isolated = "leads.csv" not in engineering_text and "report.py" not in gtm_text
    verdict = "ok" if isolated else "BROKEN"
    print(f"Isolation: {verdict} (no lead data in engineering memory, no code in GTM memory)")
    if args.keep:
        shutil.copytree(root, Path(args.keep) / "workspace", symlinks=True)
    await client.delete(sandbox)


if __name__ == "__main__":
    asyncio.run(main())
