/*
 * fuzz_config.c — the settings parsers on arbitrary text, in an embedded LuaJIT: the first
 * byte picks one.
 *   even: the command line (outlierlab.config: --key=value arguments, one per line) applied
 *         to a script's defaults; the only error allowed is a "config: ..." message.
 *   odd:  JSON (outlierlab.util.json, the checkpoint metadata and cache files): decode either
 *         refuses with "json: cannot parse ..." or the value encodes, and its canonical text
 *         decodes and encodes to the same bytes.
 * Any other error (a Lua runtime error: a bug) aborts. libFuzzer cannot instrument Lua code, so
 * under clang a line hook (fuzz_lua.h) feeds the Lua lines run, as edges (previous line, line), to
 * libFuzzer's extra counters: the fuzzer is guided by the Lua code's coverage too.
 *   make fuzz FUZZ_TARGETS=config            seeds: tests/fuzz/corpus/config
 */
#include "fuzz_lua.h"

static const char *fuzz_config_lua =
    "local config = require 'outlierlab.config'\n"
    "local json = require 'outlierlab.util.json'\n"
    "local defaults = { steps = 10, lr = 1e-3, name = 'x', flag = false, sizes = { 1, 2 }, names = { 'a' },\n"
    "                   model = { n_layer = 2, attention = { kind = 'softmax', tau = 0.5 } } }\n"
    "return function(input)\n"
    "  local mode, body = input:byte(1) or 0, input:sub(2)\n"
    "  if mode % 2 == 0 then\n"
    "    config.overrides, config.consumed = {}, {}\n"
    "    local args = {}\n"
    "    for a in (body .. '\\n'):gmatch('([^\\n]*)\\n') do args[#args + 1] = a end\n"
    "    local ok, err = pcall(function() config.set_args(args) return config.get(defaults), config.unconsumed() end)\n"
    "    if not ok and not tostring(err):find('^config: ') then error('config: not a config error: ' .. tostring(err), 0) end\n"
    "  else\n"
    "    local ok, v = pcall(json.decode, body, 'input')\n"
    "    if not ok then\n"
    "      if not tostring(v):find('json: cannot parse input', 1, true) then error('json.decode: ' .. tostring(v), 0) end\n"
    "      return\n"
    "    end\n"
    "    local ok2, s = pcall(json.encode, v)\n"
    "    if not ok2 then\n"
    "      if not tostring(s):find('^json%.encode: ') then error('json.encode: ' .. tostring(s), 0) end\n"
    "      return\n"
    "    end\n"
    "    local s2 = json.encode(json.decode(s, 'canonical text'))\n"
    "    if s2 ~= s then error('json: not canonical: ' .. s .. ' then ' .. s2, 0) end\n"
    "  end\n"
    "end\n";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lua_State *L;
    if (!L) L = fuzz_lua_state("fuzz_config_one", fuzz_config_lua, NULL);
    fuzz_lua_run(L, "fuzz_config_one", data, size);
    return 0;
}
