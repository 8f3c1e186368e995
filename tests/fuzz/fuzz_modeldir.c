/*
 * fuzz_modeldir.c — the readers of a Hugging Face model directory's text files, in an embedded
 * LuaJIT: config.json (outlierlab.pretrained.hf.config: model_type and every family's keys into
 * the project's model config) and the tokenizer files (outlierlab.pretrained.tokenizers.load:
 * tokenizer.json, vocab.json + merges.txt, vocab.txt, with tokenizer_config.json and
 * special_tokens_map.json). The first byte picks the files; the rest, cut at NUL bytes, is
 * their content:
 *   0  config.json
 *   1  tokenizer.json [NUL tokenizer_config.json [NUL special_tokens_map.json]]
 *   2  vocab.json NUL merges.txt
 *   3  vocab.txt [NUL tokenizer_config.json]
 *   4  config.json NUL special_tokens_map.json, beside a valid tokenizer.json
 * A refusal must name the directory (every message of these readers does); an accepted
 * tokenizer encodes a fixed text whose ids decode without an error. Any other error (a Lua
 * runtime error: a bug) aborts. Under clang the Lua lines run feed libFuzzer's extra counters,
 * as in fuzz_config.c.
 *   make fuzz FUZZ_TARGETS=modeldir          seeds: tests/fuzz/corpus/modeldir
 */
#include "fuzz_common.h"
#include <lua.h>
#include <lualib.h>
#include <lauxlib.h>

static const char *fuzz_modeldir_lua =
    "local dir = ...\n"
    "local hf = require 'outlierlab.pretrained.hf'\n"
    "local tokenizers = require 'outlierlab.pretrained.tokenizers'\n"
    "local FILES = { 'config.json', 'tokenizer.json', 'vocab.json', 'merges.txt', 'vocab.txt', 'tokenizer_config.json', 'special_tokens_map.json' }\n"
    "local VALID = '{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<s>\":3,\"\\\\u0120\":4},\"merges\":[\"a b\"]},'\n"
    "  .. '\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},\"added_tokens\":[{\"id\":3,\"content\":\"<s>\",\"special\":true}]}'\n"
    "local TEXT = 'Hello world, ab 12 tests. caf\\195\\169 \\240\\159\\153\\130\\n[CLS] <s> </s> end'\n"
    "local function put(name, s) if s then local f = assert(io.open(dir .. '/' .. name, 'wb')) f:write(s) f:close() end end\n"
    "local function named(ok, err, what)\n"
    "  if not ok and not tostring(err):find(dir, 1, true) then error(what .. ': the error does not name the directory: ' .. tostring(err), 0) end\n"
    "  return ok\n"
    "end\n"
    "local function tokenizer()\n"
    "  local ok, tk = pcall(tokenizers.load, dir)\n"
    "  if not named(ok, tk, 'tokenizers.load') then return end\n"
    "  local ok2, ids = pcall(tk.encode, tk, TEXT)\n"
    "  if not named(ok2, ids, 'encode') then return end\n"
    "  tk:decode(ids)\n"
    "  for _, id in ipairs(ids) do tk:category(id) end\n"
    "end\n"
    "return function(input)\n"
    "  for _, n in ipairs(FILES) do os.remove(dir .. '/' .. n) end\n"
    "  local mode, body = (input:byte(1) or 0) % 5, input:sub(2)\n"
    "  local p = {}\n"
    "  for part in (body .. '\\0'):gmatch('([^%z]*)%z') do p[#p + 1] = part end\n"
    "  if mode == 0 then\n"
    "    put('config.json', body)\n"
    "    local ok, err = pcall(hf.config, dir)\n"
    "    named(ok, err, 'hf.config')\n"
    "  elseif mode == 1 then put('tokenizer.json', p[1]) put('tokenizer_config.json', p[2]) put('special_tokens_map.json', p[3]) tokenizer()\n"
    "  elseif mode == 2 then put('vocab.json', p[1]) put('merges.txt', p[2] or '') tokenizer()\n"
    "  elseif mode == 3 then put('vocab.txt', p[1]) put('tokenizer_config.json', p[2]) tokenizer()\n"
    "  else put('config.json', p[1]) put('special_tokens_map.json', p[2]) put('tokenizer.json', VALID) tokenizer() end\n"
    "end\n";

#ifdef __clang__
__attribute__((section("__libfuzzer_extra_counters"))) static uint8_t fuzz_modeldir_edges[1 << 15];
static void fuzz_modeldir_hook(lua_State *L, lua_Debug *ar) {
    static uintptr_t prev;
    if (!lua_getinfo(L, "S", ar)) return;
    uintptr_t here = (uintptr_t)ar->source * 2654435761u + (uintptr_t)ar->currentline;
    uintptr_t e = (here ^ (prev >> 1)) * 0x9E3779B97F4A7C15ull;
    fuzz_modeldir_edges[(e >> 40) & (sizeof fuzz_modeldir_edges - 1)]++;
    prev = here;
}
#endif

static lua_State *fuzz_modeldir_state(void) {
    static lua_State *L;
    static char dir[64];
    if (L) return L;
    snprintf(dir, sizeof dir, "/tmp/ol_fuzz_modeldir_XXXXXX");
    if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
    L = luaL_newstate();
    if (!L) abort();
    luaL_openlibs(L);
    const char *root = getenv("OUTLIERLAB_ROOT");
    char code[4200];
    snprintf(code, sizeof code, "package.path = '%s/lua/?.lua;%s/lua/?/init.lua;' .. package.path",
             root ? root : ".", root ? root : ".");
    if (luaL_dostring(L, code) != 0 || luaL_loadstring(L, fuzz_modeldir_lua) != 0) abort();
    lua_pushstring(L, dir);
    if (lua_pcall(L, 1, 1, 0) != 0) {
        fprintf(stderr, "fuzz_modeldir: cannot load outlierlab.pretrained: %s (run from the repository root or set OUTLIERLAB_ROOT)\n",
                lua_tostring(L, -1));
        abort();
    }
    lua_setglobal(L, "fuzz_modeldir_one");
#ifdef __clang__
    luaL_dostring(L, "require('jit').off()");
    lua_sethook(L, fuzz_modeldir_hook, LUA_MASKLINE, 0);
#endif
    return L;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    lua_State *L = fuzz_modeldir_state();
    lua_getglobal(L, "fuzz_modeldir_one");
    lua_pushlstring(L, (const char *)data, size);
    if (lua_pcall(L, 1, 0, 0) != 0) {
        fprintf(stderr, "fuzz_modeldir: %s\n", lua_tostring(L, -1));
        abort();
    }
    lua_gc(L, LUA_GCSTEP, 0);
    return 0;
}
