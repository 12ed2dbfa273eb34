#!/usr/bin/env bash
# The one prepared script for a lent GPU machine (issue 7): every GPU number in one call.
#
# Through the device tool:   run(command="bash bench/gpu_session.sh", timeout_s=600)
# Everything lands in $OUT (the tool's folder that comes back; /tmp/gpu_session when OUT is unset):
#     env.log            nvidia-smi, python/torch/CUDA/library versions
#     pytest_gpu.log     python3 -m pytest -m gpu -q -rfE tests  (the repo's GPU-marked tests; every failure listed)
#     bench_gpu.log      python3 bench/bench_gpu.py             (table; the numbers are in bench_gpu.json)
#     bench_gpu.json     every number, with the GPU name, torch and CUDA versions
#     bench_trainer.log  python3 bench/bench_trainer.py --repeats 3 (the CPU overhead benchmark)
#     steps.log          each step's exit status and seconds (124 = it hit its timeout)
# The whole script keeps to SESSION_BUDGET_S (default 540 s, under the tool's 600 s limit): each step has its
# own `timeout`, and bench_gpu.py gets the time that is left (its --budget-s skips contenders, and says so,
# rather than being killed; its JSON is rewritten after every contender, so a kill loses nothing measured).
# Knobs (environment): SESSION_BUDGET_S, PY (default python3), BENCH_ARGS (extra bench_gpu.py arguments,
# e.g. "--only mlp --compile-mode none"), SKIP_PYTEST=1, SKIP_BENCH_TRAINER=1.
# The package is used from this checkout through PYTHONPATH (no install, nothing downloaded); the machine's
# python3 lacks optuna, whose tests skip themselves.
set -u

START=$(date +%s)
BUDGET=${SESSION_BUDGET_S:-540}
PY=${PY:-python3}
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"
: > "$OUT/steps.log"
cd "$(dirname "$0")/.." || exit 1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

left() { echo $((BUDGET - ($(date +%s) - START))); }

# step NAME CAP_SECONDS CMD...: runs CMD under `timeout min(CAP, time left)`, output to the screen and $OUT/NAME.log
step() {
    local name=$1 cap=$2 t0 rc limit
    shift 2
    limit=$(left)
    [ "$cap" -lt "$limit" ] && limit=$cap
    if [ "$limit" -lt 5 ]; then
        echo "== $name: SKIPPED (session budget spent)" | tee -a "$OUT/steps.log"
        return 0
    fi
    echo "== $name (timeout ${limit}s): $*"
    t0=$(date +%s)
    timeout --signal=TERM --kill-after=15 "$limit" "$@" 2>&1 | tee "$OUT/$name.log"
    rc=${PIPESTATUS[0]}
    echo "== $name: exit $rc after $(($(date +%s) - t0))s$([ $rc -eq 124 ] && echo ' (TIMED OUT)')" \
        | tee -a "$OUT/steps.log"
    return 0
}

cat > "$OUT/env_check.py" <<'PYEOF'
import platform, torch
print('python', platform.python_version(), '| torch', torch.__version__, '| CUDA', torch.version.cuda,
      '| cudnn', torch.backends.cudnn.version(), '| cuda available', torch.cuda.is_available())
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print('gpu', p.name, f'{p.total_memory / 2**30:.0f} GiB', 'capability', f'{p.major}.{p.minor}',
          'SMs', p.multi_processor_count)
for m in ('torchvision', 'lightning', 'pytorch_lightning', 'accelerate', 'pytest', 'pytest_timeout', 'optuna',
          'onnx', 'onnxruntime', 'onnxscript', 'tensorboard', 'sklearn', 'safetensors', 'yaml', 'tqdm', 'PIL',
          'matplotlib'):
    try:
        print(f'  {m:<18}', getattr(__import__(m), '__version__', 'present'))
    except Exception as e:
        print(f'  {m:<18} MISSING ({type(e).__name__})')
import torchwise, torchwise.train.speed.fast as f
print('torchwise', torchwise.__version__, 'from', torchwise.__file__, '| fast parts', f.PARTS)
PYEOF
step env 60 bash -c "nvidia-smi; echo; $PY '$OUT/env_check.py'; echo cpus \$(nproc); free -g | head -2; df -h /dev/shm | tail -1"

if [ "${SKIP_PYTEST:-0}" != 1 ]; then
    step pytest_gpu 170 "$PY" -m pytest -m gpu -q -rfE -p no:cacheprovider --timeout 120 tests
fi

RESERVE=90   # for bench_trainer
[ "${SKIP_BENCH_TRAINER:-0}" = 1 ] && RESERVE=0
BENCH_CAP=$(($(left) - RESERVE))
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
step bench_gpu "$BENCH_CAP" "$PY" bench/bench_gpu.py --json "$OUT/bench_gpu.json" --budget-s $((BENCH_CAP - 35)) ${BENCH_ARGS:-}

if [ "${SKIP_BENCH_TRAINER:-0}" != 1 ]; then
    step bench_trainer 90 "$PY" bench/bench_trainer.py --repeats 3
fi

echo
echo "================ summary (logs and bench_gpu.json in $OUT) ================"
cat "$OUT/steps.log"
[ -f "$OUT/pytest_gpu.log" ] && tail -n 3 "$OUT/pytest_gpu.log"
[ -f "$OUT/bench_gpu.log" ] && sed -n '/^=====/,$p' "$OUT/bench_gpu.log"
echo "session: $(($(date +%s) - START))s of ${BUDGET}s"
exit 0
