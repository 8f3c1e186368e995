-- tests/fuzz/make_seeds.lua — the realistic seeds of the fuzz corpus: a checkpoint (weights, AdamW
-- moments, JSON metadata) and a weights-only one as checkpoint.save writes them, and one token
-- file of each format as data.write_tokens writes them (the malformed seeds are tests/hostile/), and
-- the files of model directories (config.json of every family, each tokenizer format).
--   bin/outlierlab run tests/fuzz/make_seeds.lua
local ol = require "outlierlab"
local nn = require "outlierlab.nn"
local optim = require "outlierlab.optim"
local checkpoint = require "outlierlab.train.checkpoint"
local data = require "outlierlab.data"
local dir = ol.root .. "/tests/fuzz/corpus"
local ctx = ol.Context{ seed = 1, params = 4096, step_bytes = 2^20 }
local m = nn.Sequential{ nn.Linear(ctx, 3, 8, { name = "fc1" }), nn.GELU(), nn.Linear(ctx, 8, 2, { name = "fc2" }) }
local opt = optim.AdamW(ctx, { lr = 1e-3 })
checkpoint.save(dir .. "/safetensors/checkpoint_mlp.safetensors", ctx,
  { config = { train = { steps = 3, lr = 1e-3 }, model = { name = "mlp" } }, step = 3, optim = opt:state(),
    data = { step = 3 }, extra = { losses = { 1.5, 1.25, 1.0 } } })
checkpoint.save(dir .. "/safetensors/weights_only.safetensors", ctx, { step = 1 }, { optim = false })
local ids = {}
for i = 1, 64 do ids[i] = (i * 37) % 300 end
data.write_tokens(dir .. "/tokens/llmc_64.bin", ids, { format = "llmc" })
data.write_tokens(dir .. "/tokens/raw16_64.bin", ids, { format = "raw16" })

-- modeldir: a model directory's text files (tests/fuzz/fuzz_modeldir.c: the first byte picks
-- the files, NUL separates them)
local json = require "outlierlab.util.json"
os.execute("mkdir -p '" .. dir .. "/modeldir' '" .. dir .. "/llama2c'")
local function seed(name, mode, ...)
  local f = assert(io.open(dir .. "/modeldir/" .. name, "wb"))
  f:write(string.char(mode) .. table.concat({ ... }, "\0"))
  f:close()
end
local L = { hidden_size = 16, num_attention_heads = 2, num_key_value_heads = 1, num_hidden_layers = 2, intermediate_size = 32,
            vocab_size = 64, max_position_embeddings = 32, rms_norm_eps = 1e-6, rope_theta = 10000 }
local function with(t, extra) local o = {} for k, v in pairs(t) do o[k] = v end for k, v in pairs(extra) do o[k] = v end return json.encode(o) end
seed("config_gpt2", 0, json.encode { model_type = "gpt2", n_embd = 16, n_head = 2, n_layer = 2, vocab_size = 64, n_positions = 32 })
seed("config_opt", 0, json.encode { model_type = "opt", hidden_size = 16, num_attention_heads = 2, num_hidden_layers = 2, ffn_dim = 32,
                                    vocab_size = 64, max_position_embeddings = 32, word_embed_proj_dim = 8 })
seed("config_bert", 0, json.encode { model_type = "bert", hidden_size = 16, num_attention_heads = 2, num_hidden_layers = 2, intermediate_size = 32, vocab_size = 64 })
seed("config_llama3", 0, with(L, { model_type = "llama", rope_scaling = { rope_type = "llama3", factor = 8, low_freq_factor = 1,
                                                                           high_freq_factor = 4, original_max_position_embeddings = 16 } }))
seed("config_mistral", 0, with(L, { model_type = "mistral", sliding_window = 16 }))
seed("config_qwen3", 0, with(L, { model_type = "qwen3", head_dim = 4, attention_bias = true }))
seed("config_gemma2", 0, with(L, { model_type = "gemma2", head_dim = 8, query_pre_attn_scalar = 8, attn_logit_softcapping = 50,
                                   final_logit_softcapping = 30, sliding_window = 8, hidden_activation = "gelu_pytorch_tanh" }))
seed("config_phi", 0, with(L, { model_type = "phi", hidden_act = "gelu_new", partial_rotary_factor = 0.5, qk_layernorm = true, layer_norm_eps = 1e-5 }))
seed("config_falcon", 0, json.encode { model_type = "falcon", hidden_size = 16, num_attention_heads = 2, num_hidden_layers = 2, vocab_size = 64,
                                       new_decoder_architecture = true, num_kv_heads = 1, parallel_attn = true, bias = true })
seed("config_mpt", 0, json.encode { model_type = "mpt", d_model = 16, n_heads = 2, n_layers = 2, vocab_size = 64, max_seq_len = 32,
                                    attn_config = { alibi = true, alibi_bias_max = 8, clip_qkv = 6, softmax_scale = json.null } })
seed("config_vit", 0, json.encode { model_type = "vit", hidden_size = 16, num_attention_heads = 2, num_hidden_layers = 2, intermediate_size = 32,
                                    image_size = 8, patch_size = 4, id2label = { ["0"] = "a", ["1"] = "b" } })
local bytes_vocab = { ["a"] = 0, ["b"] = 1, ["ab"] = 2, ["\u{120}"] = 3, ["\u{120}ab"] = 4, ["<|endoftext|>"] = 5, ["H"] = 6, ["e"] = 7 }
seed("tokenizer_bytelevel", 1, json.encode { model = { type = "BPE", vocab = bytes_vocab, merges = { "a b", "\u{120} ab" } },
  pre_tokenizer = { type = "Sequence", pretokenizers = { { type = "Split", pattern = { Regex = "\\p{N}{1,3}" }, behavior = "Isolated" },
                                                         { type = "ByteLevel", add_prefix_space = false, use_regex = true } } },
  normalizer = { type = "NFC" }, added_tokens = { { id = 5, content = "<|endoftext|>", special = true } } },
  json.encode { bos_token = "<|endoftext|>" }, json.encode { eos_token = { content = "<|endoftext|>" } })
seed("tokenizer_sp", 1, json.encode { model = { type = "BPE", byte_fallback = true, unk_token = "<unk>",
    vocab = { ["<unk>"] = 0, ["<s>"] = 1, ["</s>"] = 2, ["<0x41>"] = 3, ["\u{2581}"] = 4, ["a"] = 5, ["b"] = 6, ["\u{2581}ab"] = 7, ["ab"] = 8 },
    merges = { "a b", "\u{2581} ab" } },
  normalizer = { type = "Sequence", normalizers = { { type = "Prepend", prepend = "\u{2581}" }, { type = "Replace", pattern = { String = " " }, content = "\u{2581}" } } },
  added_tokens = { { id = 1, content = "<s>", special = true } } })
seed("tokenizer_metaspace", 1, json.encode { model = { type = "BPE", vocab = { ["\u{2581}"] = 0, ["a"] = 1, ["\u{2581}a"] = 2 }, merges = { "\u{2581} a" } },
  pre_tokenizer = { type = "Metaspace", replacement = "\u{2581}", prepend_scheme = "first", split = true } })
seed("tokenizer_wordpiece", 1, json.encode { model = { type = "WordPiece", unk_token = "[UNK]", continuing_subword_prefix = "##",
    vocab = { ["[UNK]"] = 0, ["[CLS]"] = 1, ["[SEP]"] = 2, ["hello"] = 3, ["##s"] = 4, ["world"] = 5, [","] = 6 } },
  normalizer = { type = "BertNormalizer", lowercase = true } })
seed("vocab_merges", 2, json.encode(bytes_vocab), "#version: 0.2\na b\n\u{120} ab\n")
seed("vocab_txt", 3, "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n##s\nworld\n,\n", json.encode { do_lower_case = false })
seed("config_specials", 4, json.encode { model_type = "gpt2", bos_token_id = 3, eos_token_id = 99 }, json.encode { bos_token = "<s>", pad_token = "<pad>" })
local f = assert(io.open(dir .. "/llama2c/README", "w"))
f:write("The llama2c target's seeds are the hostile corpus, tests/hostile/llama2c/ (valid files of versions 0, 1, 2 and\ntokenizers among them): mk/fuzz.mk passes both folders.\n")
f:close()
print("seeds written to " .. dir)
