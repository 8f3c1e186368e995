# prove --exec helper: Lua test files run in bin/outlierlab with the test harness (tests/lua/lib:
# require "tap") on package.path; anything else is a test binary.
lib="$(cd "$(dirname "$0")" && pwd)/lua/lib"
case "$1" in
  *.lua) LUA_PATH="$lib/?.lua;${LUA_PATH:-;}" exec bin/outlierlab run "$@" ;;
  *)     exec "$@" ;;
esac
