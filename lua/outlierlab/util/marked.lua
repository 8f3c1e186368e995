-- outlierlab.util.marked — the generated blocks of a page: text between an opening marker and a
-- closing one that a script rewrites, the rest of the page kept byte for byte.
--
--   local marked = require "outlierlab.util.marked"
--   local new, n_blocks, n_changed = marked.rewrite(text, OPEN, CLOSE, fill, "docs/x.md" [, plain])
--
-- OPEN is a Lua pattern (its captures are passed to fill), CLOSE plain text. fill(inner, ...)
-- gets what stands between the end of OPEN's match and the start of CLOSE, and returns what
-- should stand there; with plain = true OPEN is plain text too. A block with no closing marker is
-- an error naming the page; a caller that needs exactly one block checks n_blocks.
-- scripts/verdicts.lua and scripts/findings-tables.lua write their pages with it.
local M = {}

function M.rewrite(text, open, close, fill, where, plain)
  local out, pos, n_blocks, n_changed = {}, 1, 0, 0
  while true do
    local found = { text:find(open, pos, plain) }
    local a, b = found[1], found[2]
    if not a then break end
    local c = text:find(close, b + 1, true)
    if not c then
      error(string.format("%s: the block opened by %q has no closing marker %q", where or "page",
        (text:sub(a, b):gsub("\n$", "")), close), 0)
    end
    local inner = text:sub(b + 1, c - 1)
    local new = fill(inner, unpack(found, 3))
    n_blocks = n_blocks + 1
    if new ~= inner then n_changed = n_changed + 1 end
    out[#out + 1] = text:sub(pos, b) .. new
    pos = c
  end
  out[#out + 1] = text:sub(pos)
  return table.concat(out), n_blocks, n_changed
end

return M
