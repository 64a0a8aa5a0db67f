#!/bin/bash
# Issue 27 on the lent 16-core machine (no GPU needed): bench_fleet's pack / unpack and
# bench_prune with this tree, on examples/sample_cache's first start (no vLLM there: the
# machine's torch is not the sample's, so unpack runs with --force-unpack, checks then place).
# Run on the device from the repo root with carry [".gpu-stage/f"]: wheels the image lacks
# (zstandard, cryptography, cffi, pycparser, msgspec, platformdirs for Python 3.12) and,
# where the image has no `zstd`, this machine's zstd binary and its liblz4. Steps by $STEPS (default all):
#   fleet:COPIES  bench_fleet --pack-unpack-only --copies COPIES --repeat $REPEAT (KEEP=1: its
#                 work folder is left, so a next step is not timed after its deletion)
#   prune:FILES   bench_prune --files FILES --repeat $REPEAT (the real entries' sizes)
#   prunebig:FILES  the same with --entry-files 1000 (entries of ~1,000 files)
#   phases:COPIES  benchmarks/unpack_phases.py: where an unpack of COPIES starts spends its time
#                  (and with $WRITERS, e.g. "2 8 16", as many writer threads each in turn;
#                  ONE_STREAM=1, NO_WB=1: also by one stream / without write-behind, interleaved;
#                  TAR=1: tar -x and tar -x; sync -f of the same bundle each round; TL=1: --timeline)
#   packphases:COPIES  benchmarks/pack_phases.py --profile: where a first pack of COPIES starts
#                  spends its time (and with $FRAME_WORKERS, as many frame workers each in turn)
#   afterwarm:COPIES  benchmarks/pack_after_warm.py: warm's preparation, the pack after it, a
#                  first pack and tar (same memo and bundle bytes checked)
#   floor:COPIES  benchmarks/pack_floor.py: the CPU seconds of each part a first pack cannot skip,
#                  the floor they give on these cores against tar, and a real first pack
#   durable:COPIES  benchmarks/unpack_workers.py --not-durable: unpack as shipped and without
#                  its writeback and syncfs, against tar -x and tar -x; sync -f
#   ab:COPIES     benchmarks/gpu/unpack_ab.py: unpack by the package tree carried in .gpu-stage/old
#                 (carry it too) against this one, interleaved, $REPEAT rounds (default 3; 6 is
#                 better), with tar -x and tar -x; sync -f
#   workers:COPIES  benchmarks/unpack_workers.py: unpack as shipped and by frames with $WORKERS
#                  forked workers each in turn (default "16 8 4"), against tar -x and tar -x; sync -f
# A second call on a warm machine reuses the venv in /tmp/v.
set -u
T0=$(date +%s); REPO=$PWD; F=$REPO/.gpu-stage/f; V=/tmp/v; S=/tmp/src
REPEAT=${REPEAT:-3}; STEPS=${STEPS-"fleet:100 prune:100000 prunebig:100000 fleet:360"}  # STEPS= (empty): install only
say() { echo "[$(( $(date +%s) - T0 ))s] $*" | tee -a "$OUT/steps.txt"; }
if [ ! -f $V/installed ]; then
    say "install"; rm -rf $V
    # The image's python3 is itself a venv (/opt/torch/.venv): a venv made from it sees the
    # base interpreter's packages, not the image's; a .pth file adds the image's after ours.
    SP=$(python3 -c 'import site; print(site.getsitepackages()[0])')
    python3 -m venv $V
    echo "$SP" > $V/lib/python3.12/site-packages/image-packages.pth
    $V/bin/pip install -q --no-index --no-deps "$F"/*.whl > /tmp/pip.txt 2>&1 || tail -5 /tmp/pip.txt
    $V/bin/pip install -q --no-index --no-deps --no-build-isolation . >> /tmp/pip.txt 2>&1 \
        || { tail -20 /tmp/pip.txt; say "install failed"; exit 2; }
    $V/bin/python -c 'import vllm_cache_tools.fleet.api, filelock, zstandard' || exit 2
    touch $V/installed
fi
if ! command -v zstd > /dev/null; then
    mkdir -p /tmp/zstd/lib /tmp/zstd/bin
    cp "$F/zstd" /tmp/zstd/lib/zstd.real; cp "$F"/liblz4.so.* /tmp/zstd/lib/
    printf '#!/bin/sh\nLD_LIBRARY_PATH=/tmp/zstd/lib exec /tmp/zstd/lib/zstd.real "$@"\n' \
        > /tmp/zstd/bin/zstd
    chmod +x /tmp/zstd/bin/zstd /tmp/zstd/lib/zstd.real
    export PATH=/tmp/zstd/bin:$PATH
fi
if [ ! -d $S ]; then  # the sample's first start alone (its second start's entries removed)
    cp -a examples/sample_cache $S
    rm -rf $S/torch_compile_cache/39ecaca4bf \
        $S/torch_compile_cache/torch_aot_compile/b6a18428ab0d5ff42c7c72b8fabfec0bc1f47e3de967bdff6bb6da79a64fa078
fi
{ nproc; python3 --version; zstd --version; tar --version | head -1; df -hT /tmp | tail -1;
  j=$(ls /proc/fs/jbd2 2>/dev/null | tr '\n' ' '); echo "ext4 journals: ${j:-none}";
  cat /proc/loadavg; } 2>&1 | tee -a "$OUT/steps.txt"
export PATH=$V/bin:$PATH
for step in $STEPS; do
    what=${step%%:*}; n=${step#*:}
    say "$step (load $(cut -d' ' -f1-3 /proc/loadavg))"
    rc=-
    case $what in
        fleet) timeout 560 $V/bin/python benchmarks/bench_fleet.py --pack-unpack-only --source $S \
                   --force-unpack --copies "$n" --repeat "$REPEAT" ${KEEP:+--keep-work} \
                   > "$OUT/fleet-$n.txt" 2>&1; rc=$?
               cp .bench/fleet-pack-unpack.json "$OUT/fleet-$n.json" 2>/dev/null ;;
        prune) timeout 560 $V/bin/python benchmarks/bench_prune.py --template-root examples/sample_cache \
                   --files "$n" --repeat "$REPEAT" > "$OUT/prune-$n.txt" 2>&1; rc=$?
               cp .bench/prune.json "$OUT/prune-$n.json" 2>/dev/null ;;
        prunebig) timeout 560 $V/bin/python benchmarks/bench_prune.py --template-root \
                   examples/sample_cache --files "$n" --entry-files 1000 --repeat "$REPEAT" \
                   > "$OUT/prunebig-$n.txt" 2>&1; rc=$?
               cp .bench/prune.json "$OUT/prunebig-$n.json" 2>/dev/null ;;
        phases) timeout 560 $V/bin/python benchmarks/unpack_phases.py --source $S --copies "$n" \
                   --repeat "$REPEAT" ${WRITERS:+--writers $WRITERS} ${ONE_STREAM:+--one-stream} ${NO_WB:+--no-write-behind} ${TAR:+--tar} ${TL:+--timeline} > "$OUT/phases-$n.txt" 2>&1; rc=$? ;;
        ab) timeout 560 $V/bin/python benchmarks/gpu/unpack_ab.py .gpu-stage/old . --source $S \
                   --copies "$n" --repeat "$REPEAT" > "$OUT/ab-$n.txt" 2>&1; rc=$? ;;
        workers) timeout 560 $V/bin/python benchmarks/unpack_workers.py --source $S --copies "$n" \
                   --repeat "$REPEAT" --workers ${WORKERS:-16 8 4} > "$OUT/workers-$n.txt" 2>&1; rc=$? ;;
        afterwarm) timeout 560 $V/bin/python benchmarks/pack_after_warm.py --source $S --copies "$n" \
                   --repeat "$REPEAT" > "$OUT/afterwarm-$n.txt" 2>&1; rc=$? ;;
        durable) timeout 560 $V/bin/python benchmarks/unpack_workers.py --source $S --copies "$n" \
                   --repeat "$REPEAT" --not-durable > "$OUT/durable-$n.txt" 2>&1; rc=$? ;;
        floor) timeout 560 $V/bin/python benchmarks/pack_floor.py --source $S --copies "$n" \
                   --repeat "$REPEAT" --cores 2 > "$OUT/floor-$n.txt" 2>&1; rc=$? ;;
        packphases) timeout 560 $V/bin/python benchmarks/pack_phases.py --source $S --copies "$n" \
                   --repeat "$REPEAT" --profile ${FRAME_WORKERS:+--workers $FRAME_WORKERS} > "$OUT/packphases-$n.txt" 2>&1; rc=$? ;;
    esac
    say "$step rc=$rc"
    tail -25 "$OUT/$what-$n.txt"
done
rm -rf .bench/prune-trees
say "done"
