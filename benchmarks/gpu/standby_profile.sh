#!/bin/bash
# Issue 24: where a standby's answer goes on the H200: a profiled standby (standby_profile.py as
# predict's --python); after benchmarks/gpu/predict_bench.sh in the same device call (its install).
set -u
T0=$(date +%s); REPO=$PWD; G=$REPO/.gpu-stage; S=/tmp/site; W=/tmp/gw; M=/tmp/gmodel
mkdir -p $S $W
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.txt; }
[ -f $S/vllm/_C.abi3.so ] && [ -f /tmp/compiled.ok ] && [ -d $M ] || {
    say "run benchmarks/gpu/predict_bench.sh first in this device call (its install, byte-code, model)"; exit 2; }
say "reinstall package only"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $S \
    $G/b/*.whl > $W/pip.txt 2>&1 || tail -5 $W/pip.txt
export PYTHONPATH=$S PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
    VLLM_LOGGING_LEVEL=DEBUG TOKENIZERS_PARALLELISM=false
PY=$(command -v python3)
printf '#!/bin/sh\nexec %s %s "$@"\n' "$PY" "$REPO/benchmarks/gpu/standby_profile.py" > $W/pyprof; chmod +x $W/pyprof
export VCT_REAL_PYTHON=$PY VCT_PROF_OUT=/tmp/prof XDG_CACHE_HOME=$W/xdg XDG_RUNTIME_DIR=$W/run VLLM_CACHE_TOOLS_PROBE_STANDBY=900
rm -rf $W/run $W/xdg $W/r* /tmp/prof; mkdir -p $W/run
A="$M --dtype bfloat16 --max-model-len 128 --max-num-batched-tokens 128 --max-num-seqs 16 --attention-backend TRITON_ATTN --gpu-memory-utilization 0.3"
B="$M --dtype bfloat16 --max-model-len 64 --max-num-batched-tokens 128 --max-num-seqs 16 --attention-backend TRITON_ATTN --gpu-memory-utilization 0.3"
waitsb() { python3 -c "
import glob,sys,time; from vllm_cache_tools.live.standby import ready
t=time.time()
while time.time()-t<300:
    if any(ready(__import__('pathlib').Path(p),300) for p in glob.glob('$W/run/vllm-cache-tools/*.sock')): print('ready after', round(time.time()-t,2)); sys.exit(0)
    time.sleep(0.2)
print('no standby')"; }
pr() { local name=$1; shift; local t=$(date +%s.%N); (cd /tmp && env "$@" python3 -c "import sys; from vllm_cache_tools.cli import main; sys.argv[0]='vllm-cache'; main()" predict --root $W/r1 --python $W/pyprof --usage llm --json -- $ARGS) > /tmp/$name.json 2>/tmp/$name.err; echo "rc=$?" >> /tmp/$name.err; say "$name $(python3 -c "print(round($(date +%s.%N)-$t,2))") s"; }
ARGS=$A; pr first TERM=xterm
waitsb | tee -a $OUT/steps.txt
nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv | tee -a $OUT/steps.txt
ps aux | grep -c "[-]-standby" | tee -a $OUT/steps.txt
ARGS=$A; pr counted VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
waitsb | tee -a $OUT/steps.txt
ARGS=$B; pr newargs TERM=xterm
waitsb | tee -a $OUT/steps.txt
python3 -c "from vllm_cache_tools.live.standby import leave; import glob,pathlib; [leave(pathlib.Path(p)) for p in glob.glob('$W/run/vllm-cache-tools/*.sock')]"
(cd /tmp && tar -czf $OUT/prof.tgz prof/*.txt)
for n in first counted newargs; do python3 -c "
import json,sys
try: d=json.load(open('/tmp/$n.json'))
except Exception as e: print('$n', 'no json', e); sys.exit()
p=d.get('probe',{}); print('$n', p.get('served_by'), p.get('seconds'), p.get('memo'), p.get('standby'), p.get('timings'))"; done
say done
