/*
 * fuzz_lua.h — what the harnesses of Lua readers share (fuzz_config.c, fuzz_modeldir.c): an
 * embedded LuaJIT that finds the package (OUTLIERLAB_ROOT, or the current directory), a chunk
 * that returns the function run on every input, and — under clang — libFuzzer guided by the Lua
 * code's coverage: libFuzzer cannot instrument Lua, so a line hook (JIT off) counts (previous
 * line, line) edges of the Lua code in libFuzzer's extra counters.
 */
#ifndef OL_FUZZ_LUA_H
#define OL_FUZZ_LUA_H
#include "fuzz_common.h"
#include <lua.h>
#include <lualib.h>
#include <lauxlib.h>

#ifdef __clang__
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t fuzz_lua_edges[1 << 15];
static void fuzz_lua_hook(lua_State *L, lua_Debug *ar) {
    static uintptr_t prev;
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t here = (uintptr_t)ar->source * 2654435761u + (uintptr_t)ar->currentline;
    uintptr_t e = (here ^ (prev >> 1)) * 0x9E3779B97F4A7C15ull;
    fuzz_lua_edges[(e >> 40) & (sizeof fuzz_lua_edges - 1)]++;
    prev = here;
}
#endif

/* A new state whose global `name` is the function the chunk `code` returns (called with arg). */
static lua_State *fuzz_lua_state(const char *name, const char *code, const char *arg) {
    lua_State *L = luaL_newstate();
    if (!L) abort();
    luaL_openlibs(L);
    const char *root = getenv("OUTLIERLAB_ROOT");
    char path[4200];
    snprintf(path, sizeof path, "package.path = '%s/lua/?.lua;%s/lua/?/init.lua;' .. package.path",
             root ? root : ".", root ? root : ".");
    if (luaL_dostring(L, path) != 0 || luaL_loadstring(L, code) != 0) abort();
    lua_pushstring(L, arg ? arg : "");
    if (lua_pcall(L, 1, 1, 0) != 0) {
        fprintf(stderr, "%s: cannot load the package: %s (run from the repository root or set OUTLIERLAB_ROOT)\n", name,
                lua_tostring(L, -1));
        abort();
    }
    lua_setglobal(L, name);
#ifdef __clang__
    luaL_dostring(L, "require('jit').off()");   /* hooks see every line only in the interpreter */
    lua_sethook(L, fuzz_lua_hook, LUA_MASKLINE, 0);
#endif
    return L;
}

/* The input through the global function `name`; any Lua error aborts (the harness's property). */
static void fuzz_lua_run(lua_State *L, const char *name, const uint8_t *data, size_t size) {
    lua_getglobal(L, name);
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != 0) {
        fprintf(stderr, "%s: %s\n", name, lua_tostring(L, -1));
        abort();
    }
    lua_gc(L, LUA_GCSTEP, 0);
}
#endif
