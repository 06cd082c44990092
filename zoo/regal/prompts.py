"""ReGAL's prompts, in our own words (the official repository has no licence), with the official structure:
the section markers the parsers need (``NEW PROGRAM i:``, ``NEW HELPERS:``, ``NEW PROGRAM:``), the
``# Success rate: s/t`` lines of helper summaries, and CodeLlama's ``[INST]``/``[PYTHON]`` completion layout at
test time (official `model/prompts.py`, `model/llama_prompts.py`).
"""

from __future__ import annotations

from typing import Any, Optional

LIBRARY_INTRO = {
    "logo": "The programs use a custom Python turtle library, similar to the built-in one, which is enough for "
            "every task:\n{library}",
    "textcraft": "The programs use a custom library that is enough for every task:\n{library}",
    "date": "",
}
SAME_RESULT = {
    "logo": "The rewritten programs MUST draw exactly the same image as the originals.",
    "textcraft": "The rewritten programs MUST perform exactly the same actions as the originals.",
    "date": "The rewritten programs MUST execute to the same result as the originals.",
}
DOMAIN_NOTE = {
    "logo": "If an original program uses `embed`, your version will probably need `embed` too: everything that "
            "is repeated has to be inside the code string passed to embed.",
    "textcraft": "Write helper functions that can be reused for other items.",
    "date": "",
}


def library_block(domain) -> str:
    intro = LIBRARY_INTRO[domain.name]
    return intro.format(library=domain.library) if intro else ""


def helper_list(summaries: list[str], lead: str) -> str:
    return f"\n{lead}\n" + "\n".join(summaries) if summaries else ""


def tuple_refactor_prompt(domain, examples: list[dict[str, Any]], helper_summaries: list[str],
                          helpers_first: bool) -> str:
    """Official `*_tuple_refactor_prompt`: rewrite the tuple's programs with shared helpers."""
    progs = "\n".join(f"QUERY {i}: {e['query']}\nPROGRAM {i}:\n{e['program']}" for i, e in enumerate(examples, 1))
    helpers_short = "NEW HELPERS:"
    helpers_long = ("NEW HELPERS:\n# Thoughts:\n# 1. These functions are shared by several programs: <names>\n"
                    "<code of the helper functions>")
    short = [f"NEW PROGRAM {i}:" for i in range(1, len(examples) + 1)]
    long = [f"NEW PROGRAM {i}:\n# Thoughts:\n# 1. The query asks for: <what the query wants>\n"
            f"# 2. It can be built from: <parts>\n# 3. I will use or define the helper <function> to <goal>.\n"
            f"<code of program {i}>" for i in range(1, len(examples) + 1)]
    if domain.name != "date":  # the official Python prompt has no helper section: helpers sit in the programs
        short = [helpers_short] + short if helpers_first else short + [helpers_short]
        long = [helpers_long] + long if helpers_first else long + [helpers_long]
    parts = [
        "Rewrite the following programs so that they are shorter and share code.",
        library_block(domain),
        SAME_RESULT[domain.name],
        "Start by writing helper functions that make the code shorter."
        + helper_list(helper_summaries, "You may also use these existing helper functions:"),
        progs,
        "Answer in this format:\n" + "\n".join(short),
        "Write nothing that is not valid Python code. Whatever happens, your answer MUST be formatted like this:\n"
        + "\n".join(long),
        "Make the new programs as short as possible by introducing shared helper functions. Give helpers general "
        "parameters and descriptive names. " + DOMAIN_NOTE[domain.name],
    ]
    return "\n\n".join(p for p in parts if p).rstrip() + "\n"


def retry_prompt(domain, failed: list[tuple[int, dict[str, Any], str, str, str]], helpers: str,
                 called: list[str]) -> str:
    """One feedback round for the programs that did not verify (official `retry_merge`). ``failed`` holds
    (index, example, rewritten program, result before, result after); LOGO shows no results (images)."""
    blocks, formats = [], []
    for i, ex, after, res_before, res_after in failed:
        block = f"QUERY {i}: {ex['query']}\nPROGRAM {i} (before):\n{ex['program']}\n"
        if domain.name != "logo":
            block += f"RESULT {i} (before):\n{res_before}\n"
        block += f"PROGRAM {i} (after):\n{after}\n"
        if domain.name != "logo":
            block += f"RESULT {i} (after):\n{res_after}\n"
        blocks.append(block)
        formats.append(f"NEW PROGRAM {i}:\n# Thought: 1. The results differ because <difference>.\n"
                       f"# 2. The previous version failed because <reason>.\n<code of program {i}>")
    attention = (f"Look closely at these functions and fix them if needed: {', '.join(sorted(set(called)))}."
                 if called else "")
    return "\n\n".join(p for p in [
        "ERROR: the following rewritten programs did not execute to the same result as the originals.",
        "Helper functions:\n" + (helpers or "(none)"),
        "\n".join(blocks),
        "Rewrite the programs so that they are equivalent to the originals. Do not just copy the original "
        "programs: use helper functions, and fix the helpers if you have to. " + attention,
        "Write nothing that is not valid Python code. Your answer MUST be formatted like this:\n"
        + "\n".join(formats) + "\nNEW HELPERS:\n<code of new or fixed helper functions>",
    ] if p).rstrip() + "\n"


def decompose_prompt(query: str) -> str:
    """LOGO comments, step 1 (official `logo_decompose_prompt`)."""
    return ("You are an expert programmer. Break the query below into its parts.\n"
            "Example:\nQuery: do some action 5 times and then do another action\nParts:\n"
            "The query asks for: some action, repeated, then another action\n"
            "1. repeat an action\n2. some action\n3. another action\n\n"
            f"Query: {query}\nParts:")


def comment_prompt(domain, query: str, program: str, parts: str) -> str:
    """LOGO comments, step 2 (official `logo_comment_prompt`): comment the code with the query's parts."""
    return ("Add comments to the program below that say which part of the query each chunk of code does. "
            "Do not change the code itself.\n"
            "Example:\nQuery: do some action 5 times and then do another action\nCommented code:\n"
            "# repeat an action\nfor i in range(5):\n    # some action\n    do_some_action()\n"
            "# another action\ndo_another_action()\n\n"
            f"{library_block(domain)}\n\nQuery: {query}\nParts of the query:\n{parts}\n"
            f"Code:\n{program}\n\nCommented code:\n")


def pass_fail_block(helper_name: str, passing: list[tuple[str, str]], failing: list[tuple[str, str]],
                    max_shown: int = 2) -> str:
    """The test cases of a helper for its single rewrite (official `make_pass_fail_str`: the two shortest
    programs of each kind). Officially the block is empty unless there are passing *and* failing cases; we show
    it whenever something fails, since a helper that only fails needs it most."""
    if not failing:
        return ""

    def cases(items, word):
        shown = sorted((f"Query: {q}\nProgram ({word}):\n```\n{p}\n```" for q, p in items),
                       key=lambda s: len(s.splitlines()))[:max_shown]
        return "\n\n".join(shown)

    n = len(passing) + len(failing)
    out = ["Make more of the programs that call it pass, and keep it general: add parameters instead of "
           "hard-coded values, or call other helpers. First explain, for each failing query, why its program "
           "does not do what the query asks:\nThoughts:\n1. The function passes some tests and fails others "
           "because <reason>.\n2. The failing queries asked for <intent>.\n3. The programs failed because "
           "<reason>.\n4. This can be fixed by <change>.\nThen give the new function as: NEW PROGRAM: <function>",
           f"Now {helper_name} passes in {100 * len(passing) / n:.1f}% of cases and fails in "
           f"{100 * len(failing) / n:.1f}%."]
    if passing:
        out.append("It is used in these programs, which SUCCEEDED:\n" + cases(passing, "success"))
    out.append("It is used in these programs, which FAILED:\n" + cases(failing, "failure"))
    return "\n".join(out)


def single_refactor_prompt(domain, source: str, helper_summaries: list[str], pass_fail: str) -> str:
    """Official `*_codebank_single_refactor_prompt`."""
    lib = f"It may use this library:\n```\n{domain.library}\n```\n" if domain.library else ""
    return (f"Rewrite the following function so that it works better.\nFUNCTION:\n```\n{source}\n```\n\n{lib}"
            "It may also call these helper functions:\n" + ("\n".join(helper_summaries) or "(none)")
            + f"\n{pass_fail}\nThoughts:")


def test_case_refactor_prompt(old: str, new: str, query: str, program: str) -> str:
    """Official `test_case_refactor_prompt`: update a program that calls a helper whose signature changed."""
    return ("The following functions have changed. Update the program so that it uses the new functions. "
            "Write nothing but code and comments.\n"
            f"Old function(s):\n{old}\nNew function(s):\n{new}\nQuery: {query}\nOld program:\n{program}\n"
            "New program:\n")


AGENT_INTRO = {
    "logo": "Your task is to draw simple figures with Python turtle graphics. You will use a custom turtle "
            "library, similar to the built-in one, which is enough for every task.\n\n"
            "The custom library:\n{library}",
    "date": "Your task is to solve simple word problems by writing Python programs.",
    "textcraft": "Your task is to craft Minecraft items in a simplified environment by writing Python programs. "
                 "You will use a custom library which is enough for every task.\n\nThe custom library:\n{library}",
}
AGENT_THOUGHT = {
    "logo": "the query asks for a line, so I will use the forward() function.",
    "date": "the query asks for an action, so I will use the action() function.",
    "textcraft": "the query asks to get <item>, so I will use the get_object() function.",
}


def icl_block(query: str, program: str, helpers_used: list[str], with_thought: bool,
              repeat_query: bool) -> str:
    """One in-context example (official `Agent.llama_prompt_builder`)."""
    if with_thought and helpers_used:
        lead = f"The query asked for {query} so I will" if repeat_query else "I will"
        return (f"\n# Query: {query}\n# Thought: {lead} use the helper functions: {', '.join(helpers_used)}\n"
                f"# Program:\n{program}\n")
    return f"\n# Query: {query}\n# Program:\n{program}\n"


def agent_prompt(domain, query: str, icl: str, helper_summaries: list[str],
                 crafting_commands: Optional[str] = None) -> str:
    """The test-time completion prompt (official `llama_*_agent_completion_prompt`). TextCraft queries also get
    their crafting commands (the official CodeLlama prompt drops them, its GPT prompt keeps them)."""
    intro = AGENT_INTRO[domain.name].format(library=domain.library)
    bank = helper_list(helper_summaries, "You can also choose from the following helper functions:")
    commands = f"\n{crafting_commands.strip()}\n" if crafting_commands else "\n"
    return (f"[INST] {intro}\n{bank}\n\nYou get a query and write a program for it. Start with a comment that "
            f"gives your reasoning, for example\n# Thought: {AGENT_THOUGHT[domain.name]}\n[/INST]\n[PYTHON]\n"
            f"# Examples:\n{icl}\n[/PYTHON]\n[INST]\nWrite ONLY the code that produces the answer, nothing else."
            f"{commands}[/INST]\n[PYTHON]\n# Query: {query}\n# Thought:")
