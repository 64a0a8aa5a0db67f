#!/bin/bash
# Issue 26 item 4 on the lent H200 (vLLM 0.22.1, torch 2.11): predict for a tiny Qwen3 and a
# tiny Mixtral, cold (empty root) and warm (vLLM's own root), against vLLM's log lines.
# Needs .gpu-stage/ prepared as shared/FACTS.md describes (vLLM 0.22.1 pruned to sm_90, its
# wheels, this package's wheel in .gpu-stage/b/); run on the device from the repo root with
# carry [".gpu-stage"]. MIXTRAL=1 adds the Mixtral case (needs vLLM's _moe_C library pruned to sm_90 in
# .gpu-stage/moe/moe.xz, carried in a device call of its own first: prune_fatbin.py on the wheel's vllm/_moe_C.abi3.so, then xz -6);
# LLAMA=1 adds a tiny Llama.
set -u
T0=$(date +%s); REPO=$PWD; G=$REPO/.gpu-stage; S=/tmp/site; W=/tmp/gw
mkdir -p $S $W
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.txt; }
. "$REPO/benchmarks/gpu/install_vllm.sh"  # vLLM 0.22.1 (+ its MoE kernels) into $S
export VLLM_CACHE_TOOLS_PROBE_STANDBY=0
python3 -c 'import transformers, torch; print("transformers", transformers.__version__, "torch", torch.__version__)' 2>&1 | tail -1 | tee -a $OUT/steps.txt
vc() { (cd /tmp && python3 -P -c 'import sys; from vllm_cache_tools.cli import main; sys.argv[0] = "vllm-cache"; main()' "$@"); }
KW='"dtype": "bfloat16", "max_model_len": 128, "max_num_batched_tokens": 128, "max_num_seqs": 16, "attention_backend": "TRITON_ATTN", "gpu_memory_utilization": 0.3'
one() {  # family
  f=$1; M=$W/m-$f; R=$W/root-$f; E=$W/empty-$f; mkdir -p $E
  echo "{\"family\": \"$f\", \"model_dir\": \"$M\", \"llm_kwargs\": {}, \"make_model_only\": true}" > $W/mk-$f.json
  (cd /tmp && python3 $REPO/tests/realvllm/start_family.py $W/mk-$f.json) > $OUT/mk-$f.txt 2>&1 || { say "$f model failed"; tail -5 $OUT/mk-$f.txt; return; }
  ARGS="$M --dtype bfloat16 --max-model-len 128 --max-num-batched-tokens 128 --max-num-seqs 16 --attention-backend TRITON_ATTN --gpu-memory-utilization 0.3"
  say "$f: cold predict and vLLM start, side by side"
  ( t=$(date +%s.%N); XDG_CACHE_HOME=$W/x-$f timeout 300 bash -c "$(declare -f vc); vc predict --fresh --root $E --json --usage llm -- $ARGS" > $OUT/$f-cold.json 2> $OUT/$f-cold.err; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t,1))")" >> $OUT/$f-cold.err ) &
  echo "{\"family\": \"$f\", \"model_dir\": \"$M\", \"llm_kwargs\": {$KW}}" > $W/st-$f.json
  ( t=$(date +%s); cd /tmp && XDG_CACHE_HOME=$W/x-$f VLLM_CACHE_ROOT=$R timeout 300 python3 $REPO/tests/realvllm/start_family.py $W/st-$f.json > $OUT/$f-start.log 2>&1; echo "start rc=$? s=$(( $(date +%s) - t ))" >> $OUT/$f-start.log )
  wait
  say "$f: warm predict"
  ( t=$(date +%s.%N); XDG_CACHE_HOME=$W/x-$f timeout 200 bash -c "$(declare -f vc); vc predict --root $R --json --usage llm -- $ARGS" > $OUT/$f-warm.json 2> $OUT/$f-warm.err; echo "rc=$? wall=$(python3 -c "import time;print(round(time.time()-$t,1))")" >> $OUT/$f-warm.err )
  ls $R/torch_compile_cache $R/torch_compile_cache/torch_aot_compile 2>/dev/null | tee $OUT/$f-dirs.txt
  say "$f done"
}
one qwen3 > $OUT/qwen3.out 2>&1 &
sleep 5
[ -n "${MIXTRAL:-}" ] && one mixtral > $OUT/mixtral.out 2>&1 &
wait  # the Llama after them: vLLM's memory profile counts what the other starts hold
[ -n "${LLAMA:-}" ] && one llama > $OUT/llama.out 2>&1
python3 - "$OUT" <<'PY' | tee $OUT/summary.txt
import json, re, sys, pathlib
out = pathlib.Path(sys.argv[1])
USING = re.compile(r"Using cache directory: (\S+) for vLLM's torch\.compile")
AOT = re.compile(r"(?:saved AOT compiled function to|Directly load AOT compilation from path) (\S+)")
for f in ("qwen3", "mixtral", "llama"):
    if not (out / f"{f}-start.log").exists(): continue
    log = (out / f"{f}-start.log").read_text(errors="replace") if (out / f"{f}-start.log").exists() else ""
    vb = {pathlib.Path(p).parent.parent.name for p in USING.findall(log)}
    va = {pathlib.Path(p).parent.parent.name for p in AOT.findall(log)}
    print(f, "vLLM backend", sorted(vb), "aot", sorted(va), log.strip().splitlines()[-1:] )
    for w in ("cold", "warm"):
        try:
            d = json.loads((out / f"{f}-{w}.json").read_text())
        except Exception as e:
            print(" ", w, "no json:", (out / f"{f}-{w}.err").read_text()[-600:] if (out / f"{f}-{w}.err").exists() else e); continue
        err = (out / f"{f}-{w}.err").read_text().strip().splitlines()[-1:]
        for t, truth in (("backend", vb), ("aot", va)):
            tr = d.get(t) or {}
            k = tr.get("key"); ap = "approximate" in json.dumps(tr).lower()
            v = ("exact" if {k} == truth and not ap else ("approximate(" + ("right" if {k} == truth else "wrong") + ")" if ap else f"WRONG {k}"))
            print(f"  {w} {t}: {v} predicted={k}", err)
PY
say "all done"
