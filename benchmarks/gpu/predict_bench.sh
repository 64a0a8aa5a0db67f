#!/bin/bash
# Issue 24 on the lent H200: vLLM 0.22.1 (pruned to sm_90, .gpu-stage/ as shared/FACTS.md
# describes, this package's wheel and benchmarks/bench_predict.py in .gpu-stage/b/), then
# bench_predict --gpu; run on the device from the repo root with carry [".gpu-stage"].
set -u
T0=$(date +%s); REPO=$PWD; G=$REPO/.gpu-stage; S=/tmp/site; W=/tmp/gw; M=/tmp/gmodel
mkdir -p $S $W
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.txt; }
. "$REPO/benchmarks/gpu/install_vllm.sh"  # vLLM 0.22.1 into $S, byte-code compiled
export VLLM_LOGGING_LEVEL=DEBUG
say "versions"
(cd /tmp && python3 -c 'import vllm, vllm._C, torch, vllm_cache_tools; print("vllm", vllm.__version__, "torch", torch.__version__, "vct", vllm_cache_tools.__file__)') 2>&1 | tail -2 | tee -a $OUT/steps.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a $OUT/steps.txt
nproc | tee -a $OUT/steps.txt
say "model"
echo "{\"model_dir\": \"$M\", \"llm_kwargs\": {}, \"make_model_only\": true}" > $W/mk.json
(cd /tmp && python3 $REPO/tests/realvllm/start_vllm.py $W/mk.json) > $W/mk.txt 2>&1 || tail -5 $W/mk.txt
say "bench"
cd $W && timeout 470 python3 $G/b/bench_predict.py --gpu --python "$(command -v python3)" \
    --model $M --work $W/bench --start-script $REPO/tests/realvllm/start_vllm.py > $OUT/bench.txt 2>&1
say "bench rc=$?"
cp $W/bench/predict-gpu.json $OUT/ 2>/dev/null
ls -la $OUT
grep -v "^\s*$" $OUT/bench.txt | grep -v " DEBUG \| INFO " | tail -70
say "done"
