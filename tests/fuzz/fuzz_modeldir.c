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
 * runtime error: a bug) aborts. Under clang the Lua lines run feed libFuzzer's extra counters
 * (fuzz_lua.h).
 *   make fuzz FUZZ_TARGETS=modeldir          seeds: tests/fuzz/corpus/modeldir
 */
#include "fuzz_lua.h"

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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static lua_State *L;
    if (!L) {
        static char dir[64] = "/tmp/ol_fuzz_modeldir_XXXXXX";
        if (!mkdtemp(dir)) { perror("mkdtemp"); abort(); }
        L = fuzz_lua_state("fuzz_modeldir_one", fuzz_modeldir_lua, dir);
    }
    fuzz_lua_run(L, "fuzz_modeldir_one", data, size);
    return 0;
}
