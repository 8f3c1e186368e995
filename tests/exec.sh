# prove --exec helper: Lua test files run in bin/outlierlab, anything else is a test binary.
case "$1" in
  *.lua) exec bin/outlierlab run "$@" ;;
  *)     exec "$@" ;;
esac
