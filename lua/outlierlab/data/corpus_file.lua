-- data/corpus_file — a large generated corpus written once to a token file under the cache
-- and memory-mapped by every process that reads it.
--
-- The paper profiles use corpora of 1e8–1e9 tokens. Generated in memory by every MPI rank,
-- 1e9 tokens took about 6.6 GB and 5 CPU-minutes per rank. Instead, the first process
-- generates the corpus document slice by document slice (data.corpus's first_doc: the
-- documents are independent, so the slices concatenate to the same stream) and streams it to
-- cache/corpora/<hash>.tok; every process then maps the file read-only, so the ranks of a
-- node share one copy in the page cache and a later run starts at once.
--
--   local cf = require "outlierlab.data.corpus_file"
--   local c = cf.corpus({ seed = 1, n_tokens = 1e9, vocab_size = 50304 }, "cache")
--   c.tokens[i], c.n, c.vocab, c.special, c.category(id)   -- as data.corpus, without sentence lists
--
-- File: llm.c's token format, version 1 (a header of 256 int32: 20240520, 1, count, then
-- uint16 tokens), readable by data.open_tokens and llm.c / nanoGPT tools. The name hashes
-- the settings and the generator's source (data/corpus.lua), so a changed generator writes a
-- new file. One writer at a time (outlierlab.util.fs lock); a killed writer leaves only a
-- temporary, and the next process starts again.
local ffi = require "ffi"
local corpus = require "outlierlab.data.corpus"

local M = {}
M.MAGIC, M.VERSION, M.HEADER_BYTES = 20240520, 1, 1024
M.DOCS_PER_SLICE = 20000        -- about 3M tokens (12 MB while generated) per slice

pcall(ffi.cdef, [[
int outlierlab_cf_open(const char *path, int flags, ...) __asm__("open");
int outlierlab_cf_close(int fd) __asm__("close");
void *outlierlab_cf_mmap(void *addr, size_t len, int prot, int flags, int fd, int64_t off) __asm__("mmap");
int outlierlab_cf_munmap(void *addr, size_t len) __asm__("munmap");
]])
local C = ffi.C
local O_RDONLY, PROT_READ, MAP_SHARED = 0, 1, 1

local function read_file(path)
  return require("outlierlab.util.fs").read_file(path)
end
local function exists(path)
  local f = io.open(path, "rb")
  if f then f:close() end
  return f ~= nil
end

-- the file of a corpus setting d = {seed, n_tokens, vocab_size} under cache_root
function M.path(d, cache_root)
  local E = require "outlierlab.util.fs"
  local ol = require "outlierlab"
  local gen = read_file(ol.root .. "/lua/outlierlab/data/corpus.lua") or ""
  local key = require("outlierlab.util.json").canonical({ seed = d.seed, n_tokens = d.n_tokens, vocab_size = d.vocab_size,
                                       generator = E.hash(gen), format = M.VERSION })
  return cache_root .. "/corpora/" .. E.hash(key) .. ".tok"
end

-- generate the corpus of d into path (atomically: a temporary, then rename)
function M.write(d, path)
  local n_tokens = d.n_tokens
  if n_tokens >= 2 ^ 31 then error("corpus_file: n_tokens " .. n_tokens .. " exceeds the format's 2^31 - 1", 0) end
  if (d.vocab_size or 1024) > 65536 then error("corpus_file: vocab_size above 65536 does not fit uint16 tokens", 0) end
  local tmp = path .. ".tmp." .. require("outlierlab.util.fs").pid()
  local f, err = io.open(tmp, "wb")
  if not f then error("corpus_file: cannot write " .. tostring(err), 0) end
  local hdr = ffi.new("int32_t[256]")
  hdr[0], hdr[1], hdr[2] = M.MAGIC, M.VERSION, n_tokens
  f:write(ffi.string(hdr, M.HEADER_BYTES))
  local n, first = 0, 0
  local buf = ffi.new("uint16_t[?]", 1)
  local cap = 0
  while n < n_tokens do
    local c = corpus.generate{ seed = d.seed, vocab_size = d.vocab_size, n_docs = M.DOCS_PER_SLICE, first_doc = first }
    local take = math.min(c.n, n_tokens - n)
    if take > cap then cap = take buf = ffi.new("uint16_t[?]", cap) end
    local src = c.tokens
    for i = 0, take - 1 do buf[i] = src[i] end
    f:write(ffi.string(buf, take * 2))
    n, first = n + take, first + M.DOCS_PER_SLICE
  end
  f:close()
  local ok, rerr = os.rename(tmp, path)
  if not ok then os.remove(tmp) error("corpus_file: cannot rename " .. tmp .. ": " .. tostring(rerr), 0) end
end

-- map the file read-only; checks the header and the size
function M.open(path, d)
  local fh = io.open(path, "rb")
  if not fh then error("corpus_file: no file " .. path, 0) end
  local size = fh:seek("end")
  fh:close()
  local fd = C.outlierlab_cf_open(path, O_RDONLY)
  if fd < 0 then error("corpus_file: cannot open " .. path, 0) end
  local p = C.outlierlab_cf_mmap(nil, size, PROT_READ, MAP_SHARED, fd, 0)
  C.outlierlab_cf_close(fd)
  if ffi.cast("intptr_t", p) == -1 then error("corpus_file: cannot map " .. path, 0) end
  local hdr = ffi.cast("const int32_t *", p)
  local n = hdr[2]
  if hdr[0] ~= M.MAGIC or hdr[1] ~= M.VERSION or size ~= M.HEADER_BYTES + 2 * n or n ~= d.n_tokens then
    C.outlierlab_cf_munmap(p, size)
    error(string.format("corpus_file: %s: bad header or size (magic %d, version %d, %d tokens, %d bytes; expected %d tokens)",
                        path, hdr[0], hdr[1], n, size, d.n_tokens), 0)
  end
  -- the mapping lives as long as the corpus table holds its anchor
  local anchor = ffi.gc(ffi.cast("void *", p), function(q) C.outlierlab_cf_munmap(q, size) end)
  local v = corpus.vocabulary(d.vocab_size or 1024)
  local cat = v.cat
  return {
    tokens = ffi.cast("const uint16_t *", ffi.cast("const char *", p) + M.HEADER_BYTES), n = n, seed = d.seed,
    vocab_size = v.size, vocab = v.words, special = corpus.special,
    category = function(id) return cat[id] end, categories = cat,
    kind = "synthetic", file = path, _map = anchor,
  }
end

-- the corpus of d, from its file under cache_root (written first by one process when missing)
function M.corpus(d, cache_root, log)
  local path = M.path(d, cache_root)
  if not exists(path) then
    local fs = require "outlierlab.util.fs"
    fs.mkdir_p(cache_root .. "/corpora", "corpus cache")
    local lk = fs.lock(path .. ".lock", { until_fn = function() return exists(path) end,
      on_wait = function(owner) if log then log("corpus file %s: %s is writing it; waiting", path, owner) end end })
    if lk then
      if not exists(path) then
        if log then log("corpus file %s: generating %d tokens (once; later runs and other ranks map it)", path, d.n_tokens) end
        local ok, err = pcall(M.write, d, path)
        if not ok then lk:release() error(err, 0) end
      end
      lk:release()
    end
  end
  return M.open(path, d)
end

return M
