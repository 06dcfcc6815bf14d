# Shared by the CLI test scripts (sourced): `expect` runs the program under test
# ($bin) and checks its exit code and output; `failures` counts what failed.
failures=0
pass() { echo "ok   $1"; }
fail() {
  echo "FAIL $1"
  failures=$((failures + 1))
}
expect() {  # expect <name> <expected exit code> <text the output must contain> -- <args...>
  local name=$1 code=$2 text=$3
  shift 4
  local out rc
  out=$("$bin" "$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ] || ! grep -qF -- "$text" <<<"$out"; then
    echo "$out" | tail -20
    fail "$name: exit $rc (want $code), want text '$text'"
  else
    pass "$name"
  fi
}
# Whether $bin was built with a sanitizer that makes it many times slower
# (AddressSanitizer, as -DREFORMER_SANITIZE=ON builds it; ThreadSanitizer;
# MemorySanitizer): the scripts then skip their wall-clock bounds and keep every
# functional check. Instrumented code calls the sanitizer's init function, so its
# name is in the binary (statically or dynamically linked runtime alike).
# REFORMER_TEST_SANITIZED=1 or 0 overrides the detection.
sanitized() {
  case "${REFORMER_TEST_SANITIZED:-}" in
  1) return 0 ;;
  0) return 1 ;;
  esac
  grep -qaE '__(a|t|m)san_init' "$bin"
}
