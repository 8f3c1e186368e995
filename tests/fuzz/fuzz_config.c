/*
 * fuzz_config.c — the settings parsers on arbitrary text, in an embedded LuaJIT: the first
 * byte picks one.
 *   even: the command line (outlierlab.config: --key=value arguments, one per line) applied
 *         to a script's defaults; the only error allowed is a "config: ..." message.
 *   odd:  JSON (outlierlab.util.json, the checkpoint metadata and cache files): decode either
 *         refuses with "json: cannot parse ..." or the value encodes, and its canonical text
 *         decodes and encodes to the same bytes.
 * Any other error (a Lua runtime error: a bug) aborts. libFuzzer cannot instrument Lua code, so
 * under clang a line hook (JIT off) feeds the Lua lines run, as edges (previous line, line), to
 * libFuzzer's extra counters: the fuzzer is guided by the Lua code's coverage too.
 *   make fuzz FUZZ_TARGETS=config            seeds: tests/fuzz/corpus/config
 */
#include "fuzz_common.h"
#include <lua.h>
#include <lualib.h>
#include <lauxlib.h>

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

#ifdef __clang__
/* Lua line coverage for libFuzzer: one counter per (previous line, line) edge, hashed */
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t fuzz_lua_edges[1 << 15];
static void fuzz_line_hook(lua_State *L, lua_Debug *ar) {
    static uintptr_t prev;
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t here = (uintptr_t)ar->source * 2654435761u + (uintptr_t)ar->currentline;
    uintptr_t e = (here ^ (prev >> 1)) * 0x9E3779B97F4A7C15ull;
    fuzz_lua_edges[(e >> 40) & (sizeof fuzz_lua_edges - 1)]++;
    prev = here;
}
#endif

static lua_State *fuzz_config_state(void) {
    static lua_State *L;
    if (L) return L;
    L = luaL_newstate();
    if (!L) abort();
    luaL_openlibs(L);
    const char *root = getenv("OUTLIERLAB_ROOT");
    char code[4200];
    snprintf(code, sizeof code, "package.path = '%s/lua/?.lua;%s/lua/?/init.lua;' .. package.path",
             root ? root : ".", root ? root : ".");
    if (luaL_dostring(L, code) != 0 || luaL_loadstring(L, fuzz_config_lua) != 0 || lua_pcall(L, 0, 1, 0) != 0) {
        fprintf(stderr, "fuzz_config: cannot load outlierlab.config: %s (run from the repository root or set OUTLIERLAB_ROOT)\n",
                lua_tostring(L, -1));
        abort();
    }
    lua_setglobal(L, "fuzz_config_one");
#ifdef __clang__
    luaL_dostring(L, "require('jit').off()");   /* hooks see every line only in the interpreter */
    lua_sethook(L, fuzz_line_hook, LUA_MASKLINE, 0);
#endif
    return L;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lua_State *L = fuzz_config_state();
    lua_getglobal(L, "fuzz_config_one");
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != 0) {
        fprintf(stderr, "fuzz_config: %s\n", lua_tostring(L, -1));
        abort();
    }
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
