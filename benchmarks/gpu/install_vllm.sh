# Sourced by the GPU scripts beside it (predict_bench.sh, truth_family.sh): installs vLLM 0.22.1
# pruned to sm_90 (.gpu-stage/ prepared as shared/FACTS.md describes: its wheels in whl/, this
# package's wheel in b/, vLLM's Python files and pruned libraries in s/, and vLLM's MoE kernels
# pruned the same way in moe/moe.xz where the Mixtral case needs them) into $S, then compiles
# byte-code once. Needs G (the staging), S (the target folder), W (a work folder), OUT and
# say() from the script that sources it; leaves PYTHONPATH and the run's variables exported.
unxz() { python3 -c 'import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'; }
say "install"
mkdir -p "$S" "$W"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target $S \
    $G/whl/*.whl $G/b/*.whl > $W/pip.txt 2>&1 || { tail -20 $W/pip.txt; say "pip failed"; }
unxz < $G/s/py.tar.xz | tar -x -C $S
unxz < $G/s/C.xz > $S/vllm/_C.abi3.so
unxz < $G/s/Cs.xz > $S/vllm/_C_stable_libtorch.abi3.so
unxz < $G/s/small-so.tar.xz | tar -x -C $S
# vLLM's MoE kernels (Mixtral), pruned to sm_90 like _C when the staging carries them (moe/moe.xz).
if [ -f $G/moe/moe.xz ]; then unxz < $G/moe/moe.xz > $S/vllm/_moe_C.abi3.so; fi
mkdir -p $S/vllm/vllm_flash_attn; : > $S/vllm/vllm_flash_attn/_vllm_fa2_C.py
export PYTHONPATH=$S PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 VLLM_USE_FLASHINFER_SAMPLER=0 \
    TOKENIZERS_PARALLELISM=false
# The lent device sets PYTHONDONTWRITEBYTECODE=1 and ships no __pycache__: every process
# there compiled every module it imported from source (2.1 s of a 7.4 s standby answer,
# about half of a fresh import of vLLM; 2026-12-03). A real install has byte-code (pip
# compiles at install; a writable one is compiled on first import): compile it once here,
# so that vLLM's own start and predict both read byte-code, as on a real host.
say "compileall"
SP=$(python3 -c "import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))")
env -u PYTHONDONTWRITEBYTECODE python3 -m compileall -q -j 16 $S $SP > $W/compileall.txt 2>&1
say "compileall rc=$?"; touch /tmp/compiled.ok
