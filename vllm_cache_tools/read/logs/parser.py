"""The parser: :class:`LogParser` takes lines one at a time, dispatches each message to the
builder it belongs to and hands out each start once the next one begins.
"""

from __future__ import annotations

from vllm_cache_tools.read.logs.builders import _Block, _finish_env, _Fn, _Proc, _Start
from vllm_cache_tools.read.logs.headers import _TAG_RE, _Line, _parse_line
from vllm_cache_tools.read.logs.patterns import (
    _A0,
    _A1,
    _A2,
    _A3,
    _AOT_FAILED,
    _AOT_LOADED,
    _AOT_SAVE_ERR,
    _AOT_SAVED,
    _ARGS,
    _CACHE_DIR,
    _CACHE_FOR_LATER,
    _COMPILING,
    _DIRECT_GRAPHS,
    _DYNAMO,
    _EAGER,
    _ENGINE,
    _ENV_ENTRY,
    _FACTORS,
    _GRAPH_SAVED,
    _INIT_ENGINE,
    _LOOKUP_06,
    _MODE,
    _NTH_LOAD,
    _NTH_STORE,
    _OPENERS,
    _S0,
    _S1,
    _S2,
    _S3,
    _START_FN,
    _TOTAL,
    _match_from,
)
from vllm_cache_tools.read.logs.records import (
    EngineInit,
    LoadFailure,
    LoggedFactors,
    RangeTiming,
    StartLog,
    Where,
)
from vllm_cache_tools.read.pyrepr import parse_repr

MAX_TRACED = 100_000
MAX_FUNCTIONS = 10_000
MAX_PROCESSES = 10_000
MAX_ENV = 100_000
# --------------------------------------------------------------------------------------------
# The parser


class LogParser:
    """Feed it lines (``feed``), take finished starts (``pop``); ``close`` ends the stream.

    Lines need not be pre-filtered; lines without any of :data:`ANCHORS` are ignored
    anyway, which is what makes the grep pre-filter safe."""

    def __init__(self, source: str = "<log>", first_index: int = 1) -> None:
        self.source = source
        self._next_index = first_index
        self._start: _Start | None = None
        self._done: list[StartLog] = []
        self._hot: _Block | None = None
        self.lines_seen = 0

    # -- public

    def feed(self, raw: bytes | str, lineno: int | None = None) -> None:
        # The same anchor test as the grep pre-filter, so every input path reads the same.
        if isinstance(raw, bytes):
            if not (_A0 in raw or _A1 in raw or _A2 in raw or _A3 in raw):
                return
            text = raw.decode("utf-8", "replace")
        else:
            if not (_S0 in raw or _S1 in raw or _S2 in raw or _S3 in raw):
                return
            text = raw
        text = text.rstrip("\r\n")
        hot = self._hot
        if hot is not None and hot.proc.block is hot and text.startswith(hot.header):
            # Fast path: the next line of the multi-line record being read (most lines of a
            # DEBUG log's compile section are these).
            msg = text[len(hot.header):]
            cr = msg.find("\r")
            if cr >= 0:
                msg = msg[:cr]
            if not msg.startswith(_OPENERS) and self._start is not None:
                self._start.last_line = lineno
                if hot.kind == "traced":
                    _add_traced(self._start, hot.fn, msg)
                else:
                    self._env_line(hot.proc, hot, msg)
                return
        line = _parse_line(text)
        if line is None:
            return
        self.lines_seen += 1
        self._handle(line, Where(self.source, lineno))

    def set_source(self, source: str) -> None:
        self.source = source

    @property
    def pending(self) -> bool:
        return bool(self._done)

    @property
    def next_index(self) -> int:
        return self._next_index

    def pop(self) -> list[StartLog]:
        done, self._done = self._done, []
        return done

    def close(self) -> list[StartLog]:
        if self._start is not None:
            self._emit(ends_log=True)
        return self.pop()

    # -- internals

    def _emit(self, ends_log: bool = False) -> None:
        st = self._start
        assert st is not None
        self._start = None
        if st.has_content or st.version or st.model or st.args is not None:
            self._done.append(st.freeze(ends_log))
            self._next_index = st.index + 1

    def _new_start(self, where: Where, ts: str) -> _Start:
        if self._start is not None:
            self._emit()
        self._start = _Start(self._next_index, where, ts)
        return self._start

    def _proc(self, st: _Start, line: _Line) -> _Proc:
        name, pid = line.proc
        p = st.procs.get(pid)
        if p is None:
            if len(st.procs) >= MAX_PROCESSES:
                st.warn_once("procs", f"more than {MAX_PROCESSES} processes in one start; "
                             "the rest are ignored")
                p = _Proc(pid)  # detached: read but never reported
            else:
                p = st.procs[pid] = _Proc(pid)
        if name and (not p.names or p.names[-1] != name):
            if name not in p.names:
                p.names.append(name)
            else:
                p.names.remove(name)
                p.names.append(name)
        if line.ip:
            p.ip = line.ip
        return p

    def _handle(self, line: _Line, where: Where) -> None:
        msg = line.msg
        st = self._start
        # Continuation of an open multi-line record of this process?
        if st is not None:
            p = st.procs.get(line.proc[1])
            if p is not None and p.block is not None:
                blk = p.block
                if line.header == blk.header and not msg.startswith(_OPENERS):
                    self._hot = blk
                    st.last_line = where.line
                    if blk.kind == "traced":
                        _add_traced(st, blk.fn, msg)
                    else:
                        self._env_line(p, blk, msg)
                    return
                if blk.kind == "env":
                    _finish_env(blk.fn, closed=False)
                p.block = None

        if msg.startswith(_ARGS):
            # Logged once per start, before the engine: a start boundary.
            args = parse_repr(msg[len(_ARGS):])
            args = args if isinstance(args, dict) else {}
            if st is None or st.has_content or st.engines or (
                    st.args is not None and st.args != args):
                st = self._new_start(where, line.ts)
            st.args = args
            st.last_line, st.last_time = where.line, line.ts
            return

        m = _ENGINE.search(msg) if "engine (" in msg else None
        if m is not None and "Initializing" in msg:
            pid = line.proc[1]
            if st is None or (st.has_content and pid not in st.engines) or pid in st.engines:
                st = self._new_start(where, line.ts)
            st.engines.add(pid)
            self._proc(st, line).is_engine = True
            st.version = st.version or m.group(1)
            st.model = st.model or m.group(2)
            if st.engine_config is None:
                st.engine_config = msg.partition("with config: ")[2]
                mm = _MODE.search(msg)
                if mm is not None:
                    st.compile_mode = int(mm.group(1) or mm.group(2))
                me = _EAGER.search(msg)
                if me is not None:
                    st.enforce_eager = me.group(1) == "True"
            st.last_line, st.last_time = where.line, line.ts
            return

        tag = None
        if msg.startswith("["):
            tm = _TAG_RE.match(msg)
            if tm is not None:
                tag, msg = tm.group(1), msg[tm.end():]
        if st is None:
            st = self._new_start(where, line.ts)
        p = self._proc(st, line)
        if self._dispatch(st, p, line, tag, msg, where):
            st.last_line, st.last_time = where.line, line.ts

    def _fn(self, st: _Start, p: _Proc, tag: str | None, where: Where, ts: str,
            opening: bool = False) -> _Fn:
        """The function record a line belongs to. Tagged lines go to the latest record with
        that tag (or claim the current untagged one); untagged lines go to the current record.
        An ``opening`` line (start of compilation, traced-file list) begins a new record when
        the one it would join has already finished."""
        cur = p.fns[-1] if p.fns else None
        fn: _Fn | None = cur
        if tag is not None:
            fn = next((f for f in reversed(p.fns) if f.tag == tag), None)
            if fn is None and cur is not None and cur.tag is None:
                fn = cur
        if fn is not None and opening and fn.done:
            fn = None
        if fn is None:
            fn = _Fn(where, ts)
            if len(p.fns) >= MAX_FUNCTIONS:
                st.warn_once("fns", f"more than {MAX_FUNCTIONS} compiled functions in one "
                             "process; the rest are ignored")
            else:
                p.fns.append(fn)
        if tag is not None and fn.tag is None:
            fn.tag = tag
        fn.last_time = ts
        return fn

    def _dispatch(self, st: _Start, p: _Proc, line: _Line, tag: str | None, msg: str,
                  where: Where) -> bool:
        ts = line.ts
        if "init engine" in msg:
            m = _INIT_ENGINE.search(msg)
            if m is None:
                return False
            p.engine_init = EngineInit(float(m.group(1)),
                                       float(m.group(2)) if m.group(2) else None, where)
            return True
        if msg.startswith("Start compiling function"):
            m = _START_FN.match(msg)
            fn = self._fn(st, p, tag, where, ts, opening=True)
            fn.started = True
            if m is not None and m.group(1):
                fn.code_name, fn.code_file, fn.code_line = (m.group(1), m.group(2),
                                                            int(m.group(3)))
            return True
        if msg.startswith("Starting torch.compile"):
            fn = self._fn(st, p, tag, where, ts, opening=True)
            fn.started = True
            return True
        if msg.startswith("Traced files ("):
            fn = self._fn(st, p, tag, where, ts, opening=True)
            p.block = self._hot = _Block("traced", line.header, fn, p)
            rest = msg.partition(":")[2].strip()
            if rest:  # a logging setup that kept the list on one line
                for path in rest.split():
                    _add_traced(st, fn, path)
            return True
        if msg.startswith("Compile env factors ("):
            fn = self._fn(st, p, tag, where, ts)
            fn.env = {}
            fn.env_last = None
            fn.env_truncated = False
            p.block = self._hot = _Block("env", line.header, fn, p)
            return True
        return self._cache_line(st, p, tag, msg, where, ts)

    def _cache_line(self, st: _Start, p: _Proc, tag: str | None, msg: str, where: Where,
                    ts: str) -> bool:
        """Lines about the cache folders, factors and the AOT artifact."""
        if "torch.compile" in msg:
            m = _TOTAL.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).total_s = float(m.group(1))
                return True
            m = _match_from(_CACHE_DIR, msg, "Using cache directory: ")
            if m is not None:
                self._fn(st, p, tag, where, ts).cache_dir = m.group(1)
                return True
            m = _FACTORS.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).factors = LoggedFactors(
                    m.group(1) or None, m.group(2) or None, m.group(3) or None,
                    m.group(4) or None, m.group(5) or None)
                return True
            if "torch.compile cache is disabled" in msg:
                self._fn(st, p, tag, where, ts).cache_disabled = True
                return True
            return False
        if "AOT" in msg or "aot compilation" in msg:
            m = _AOT_LOADED.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).aot_loaded = m.group(1)
                return True
            m = _AOT_SAVED.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).aot_saved = m.group(1)
                return True
            m = _AOT_SAVE_ERR.search(msg)
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.aot_save_error = f"{m.group(1) or m.group(2)}: {m.group(3)}"
                return True
        if "load failure from" in msg or "Cannot load aot compilation" in msg:
            m = _match_from(_AOT_FAILED, msg, "Compiling model again due to a load failure",
                            "Cannot load aot compilation from path")
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.load_failure = LoadFailure(m.group(1) or m.group(2) or "", m.group(3),
                                              where)
                return True
        return self._graph_line(st, p, tag, msg, where, ts)

    def _graph_line(self, st: _Start, p: _Proc, tag: str | None, msg: str, where: Where,
                    ts: str) -> bool:
        """Lines about graphs: Dynamo time, compiled and loaded ranges, saved graphs."""
        if "Dynamo bytecode transform time" in msg:
            m = _DYNAMO.search(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).dynamo_s = float(m.group(1))
                return True
            return False
        if msg.startswith("Compiling a graph for"):
            m = _COMPILING.match(msg)
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.ranges.append(RangeTiming(m.group(1), "compile", float(m.group(2)), where))
                return True
            return False
        if "irectly l" in msg:
            m = _match_from(_DIRECT_GRAPHS, msg, "Directly load the compiled graph")
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.ranges.append(RangeTiming(m.group(1), "load",
                                             float(m.group(2)) if m.group(2) else None, where))
                return True
            m = _match_from(_LOOKUP_06, msg, "Directly lookup the graph for ")
            if m is not None:
                fn = self._fn(st, p, tag, where, ts)
                fn.ranges.append(RangeTiming(m.group(1), "load", None, where))
                return True
            if _NTH_LOAD.match(msg):
                self._fn(st, p, tag, where, ts).graphs_loaded += 1
                return True
            return False
        if _NTH_STORE.match(msg):
            self._fn(st, p, tag, where, ts).graphs_stored += 1
            return True
        if msg.startswith("Cache the graph"):
            m = _CACHE_FOR_LATER.match(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).cached_for_later.append(m.group(1))
                return True
            return False
        if msg.startswith("Computation graph saved to"):
            m = _GRAPH_SAVED.match(msg)
            if m is not None:
                self._fn(st, p, tag, where, ts).graph_saved.append(m.group(1))
                return True
        return False

    def _env_line(self, p: _Proc, blk: _Block, msg: str) -> None:
        fn = blk.fn
        env = fn.env
        if env is None:
            return
        if msg.startswith("Vllm config hash: "):
            fn.config_hash = msg[len("Vllm config hash: "):].strip() or None
            _finish_env(fn, closed=True)
            p.block = None
            return
        if msg.startswith("{}"):
            _finish_env(fn, closed=True)
            return
        m = _ENV_ENTRY.match(msg)
        if m is not None:
            if fn.env_last is not None:
                env[fn.env_last] = env[fn.env_last].rstrip().rstrip(",")
            key = m.group(1)
            if len(env) >= MAX_ENV and key not in env:
                return
            env[key] = m.group(2)
            fn.env_last = key
        elif fn.env_last is not None:
            # pprint wrapped a long value over several lines: keep it one Python expression.
            env[fn.env_last] = env[fn.env_last] + " " + msg.strip()


def _add_traced(st: _Start, fn: _Fn, path: str) -> None:
    path = path.strip()
    if not path or path in fn.traced_seen:
        return
    if len(fn.traced) >= MAX_TRACED:
        st.warn_once("traced", f"more than {MAX_TRACED} traced files for one function; the "
                     "rest are ignored")
        return
    fn.traced_seen.add(path)
    fn.traced.append(path)
