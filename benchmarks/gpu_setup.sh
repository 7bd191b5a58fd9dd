# Sourced by the GPU run scripts: unbuffered output, $OUT, the carried wheels (.whl: expecttest)
# on PYTHONPATH, and fxslots installed from this tree.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
python3 -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
# cuda_tests PREFIX LIMIT_S FILE...: each file's CUDA tests on their own, with a time limit, the
# output in $OUT/PREFIX-<file>.txt and its summary lines printed.
cuda_tests() {
  local prefix=$1 limit=$2; shift 2
  for f in "$@"; do
    local name; name=$(basename "$f" .py)
    timeout "$limit" python3 -m pytest -q -m cuda "$f" -p no:cacheprovider -o log_level=WARNING \
      --timeout 120 -rfE --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/$prefix-$name.txt"
    grep -E "passed|failed|^FAILED|^ERROR" "$OUT/$prefix-$name.txt" | tail -20
  done
}
# cuda_tests_printing PREFIX LIMIT_S FILE...: the files' CUDA tests in one pytest run with their
# prints shown (-s: the figures a test prints, such as a pool's segments), the output in
# $OUT/PREFIX-tests.txt, its printed figures and summary lines printed.
cuda_tests_printing() {
  local prefix=$1 limit=$2; shift 2
  timeout "$limit" python3 -m pytest -q -m cuda "$@" -s -p no:cacheprovider -o log_level=WARNING \
    --timeout 150 -rfE --tb=short 2>&1 | grep -v "torch.__trace" > "$OUT/$prefix-tests.txt"
  grep -E "room |graph pool|passed|failed|^FAILED|^ERROR|^E  " "$OUT/$prefix-tests.txt"
}
