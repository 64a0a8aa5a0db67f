"""What the parser looks for: the :data:`ANCHORS` every useful line contains (the cheap
pre-filter, shared by the Python path and grep) and one regex per message kind.
"""

from __future__ import annotations

import re

# Every line the parser uses contains one of these (vLLM 0.6 .. 0.33, INFO and DEBUG):
# "ompil" covers compile/compiling/Compiling/compilation/torch.compile/Compile env and, in
# DEBUG logs of vLLM >= 0.11, every line from vllm/compilation/ (location "[compilation/..");
# "backends.py:" covers continuation lines and INFO lines of older versions
# ("[backends.py:370] /path/file.py", "Dynamo bytecode transform time");
# "engine (" covers "init engine (profile, ...)" and "Initializing a V1 LLM engine (v0.8.5)";
# "default args: {" the arguments a start was given ("non-default args: {...}", vLLM >= 0.9,
# logged before the engine; it costs grep -F some 5-15% more time on a serving-style log,
# "non-default args" more). Few and long enough that grep (or a bytes `in`) rejects the other
# lines quickly.
ANCHORS: tuple[bytes, ...] = (b"ompil", b"backends.py:", b"engine (", b"default args: {")

_A0, _A1, _A2, _A3 = ANCHORS
_S0, _S1, _S2, _S3 = (a.decode() for a in ANCHORS)

_OPENERS = ("Traced files (", "Compile env factors (")
# --------------------------------------------------------------------------------------------
# Message patterns (one regex per message kind; dispatched on a cheap substring first)

_NUM = r"(\d+(?:\.\d+)?)"
_START_FN = re.compile(r"Start compiling function (?:<code object (\S+) at \S+, "
                       r"file \"([^\"]*)\", line (\d+)>)?")
_CACHE_DIR = re.compile(r"Using cache directory: (.+?) for vLLM's torch\.compile")
_FACTORS = re.compile(r"torch\.compile cache factors: env=(\S*) cfg=(\S*) comp=(\S*) "
                      r"code=(\S*)(?: dir=(.*))?")
_DYNAMO = re.compile(r"Dynamo bytecode transform time: " + _NUM + " s")
_COMPILING = re.compile(r"Compiling a graph for (.+?) takes " + _NUM + " s")
_DIRECT_GRAPHS = re.compile(r"Directly load the compiled graphs?(?:\(s\))? for (.+?) from the "
                            r"cache(?:, took " + _NUM + " s)?")
_LOOKUP_06 = re.compile(r"Directly lookup the graph for (.+?) from the cache")
_NTH_LOAD = re.compile(r"[Dd]irectly (?:load|lookup) the \d+-th graph")
_NTH_STORE = re.compile(r"[Ss]tore the \d+-th graph")
_CACHE_FOR_LATER = re.compile(r"Cache the graph (?:of |for )(.+?) for later use")
_GRAPH_SAVED = re.compile(r"Computation graph saved to (.+)")
_AOT_SAVED = re.compile(r"saved AOT compiled function to (.+)")
_AOT_SAVE_ERR = re.compile(r"(?:unable to save AOT compiled function to (\S+): |"
                           r"Cannot save aot compilation to path (\S+), error: )(.*)")
_AOT_LOADED = re.compile(r"Directly load AOT compilation from path (.+)")
_AOT_FAILED = re.compile(r"(?:Compiling model again due to a load failure from (.+?), reason: |"
                         r"Cannot load aot compilation from path (.+?), error: )(.*)")
_TOTAL = re.compile(r"torch\.compile (?:took|takes) " + _NUM + r" s in total")
_INIT_ENGINE = re.compile(r"init engine \(profile, create kv cache, warmup model\) took "
                          + _NUM + r" s(?:econds)?(?: \(compilation: " + _NUM + " s)?")
_ENGINE = re.compile(r"Initializing (?:a V[01] LLM|an LLM) engine \(v([^)\s]*)\) with config: "
                     r"(?:.*?\bmodel='([^']*)')?")
def _match_from(pattern: re.Pattern[str], msg: str, *prefixes: str) -> re.Match[str] | None:
    """``pattern`` (which starts with one of ``prefixes``) tried once where each prefix first
    occurs: ``search`` would retry its lazy ``(.+?) <suffix>`` from every later occurrence,
    quadratic on a hostile line (300 KB: a minute). A later occurrence cannot match where the
    first does not: the lazy group may span it."""
    for prefix in prefixes:
        i = msg.find(prefix)
        if i >= 0:
            m = pattern.match(msg, i)
            if m is not None:
                return m
    return None


_ENV_ENTRY = re.compile(r"[{ ]'([^'\\]+)': (.*)")
# compilation_config={'mode': <CompilationMode.VLLM_COMPILE: 3>, .. (0.11+),
# {"level":3,.. (0.8-0.10, JSON), {'level': 3, ..; CompilationConfig(level=3, ..
_MODE = re.compile(r"\bcompilation_config=(?:\{\s*['\"]|\w+\()(?:mode|level)['\"]?\s*[:=]\s*"
                   r"(?:<[\w.]+:\s*(\d+)>|(\d+))")
_EAGER = re.compile(r"\benforce_eager=(True|False)\b")
_ARGS = "non-default args: "
