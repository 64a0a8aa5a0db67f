#!/bin/bash
# Issue 24 on the lent H200: vLLM 0.22.1 (pruned to sm_90, .gpu-stage/ as shared/FACTS.md
# describes, this package's wheel and benchmarks/bench_predict.py in .gpu-stage/b/), then
# bench_predict --gpu; run on the device from the repo root with carry [".gpu-stage"].
set -u
T0=$(date +%s); REPO=$PWD; G=$REPO/.gpu-stage; S=/tmp/site; W=/tmp/gw; M=/tmp/gmodel
mkdir -p $S $W
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a $OUT/steps.txt; }
unxz() { python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'; }
say "install"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S \
    $G/whl/*.whl $G/b/*.whl > $W/pip.txt 2>&1 || { tail -20 $W/pip.txt; say "pip failed"; }
unxz < $G/s/py.tar.xz | tar -x -C $S
unxz < $G/s/C.xz > $S/vllm/_C.abi3.so
unxz < $G/s/Cs.xz > $S/vllm/_C_stable_libtorch.abi3.so
unxz < $G/s/small-so.tar.xz | tar -x -C $S
mkdir -p $S/vllm/vllm_flash_attn; : > $S/vllm/vllm_flash_attn/_vllm_fa2_C.py
export PYTHONPATH=$S PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
    VLLM_LOGGING_LEVEL=DEBUG TOKENIZERS_PARALLELISM=false
# The lent device sets PYTHONDONTWRITEBYTECODE=1 and ships no __pycache__: every process
# there compiled every module it imported from source (2.1 s of a 7.4 s standby answer,
# about half of a fresh import of vLLM; 2026-12-03). A real install has byte-code (pip
# compiles at install; a writable one is compiled on first import): compile it once here,
# so that the floor, vLLM's own start and predict all read byte-code, as on a real host.
say "compileall"
SP=$(python3 -c "import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))")
env -u PYTHONDONTWRITEBYTECODE python3 -m compileall -q -j 16 $S $SP > $W/compileall.txt 2>&1
say "compileall rc=$?"; touch /tmp/compiled.ok
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
