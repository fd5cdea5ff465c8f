-- Prelude part: Redis time, numbers as digits, variadic calls in slices, sorted hashes, bits.

-- Redis time, not a worker's clock: workers with skewed clocks agree on who expired.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Integers as plain digits (Lua 5.1 would print large ones in exponent form).
local function int(x)
  return string.format('%.0f', x)
end

-- Whether digit string `a` is a larger number than `b` (no leading zeros): exact for every
-- long, where a double is not past 2^53.
local function digits_above(a, b)
  return #a > #b or (#a == #b and a > b)
end

-- Lua's unpack takes at most a few thousand values: variadic calls go in slices.
local SLICE = 4000
local function each_slice(values, call)
  for i = 1, #values, SLICE do
    call(unpack(values, i, math.min(i + SLICE - 1, #values)))
  end
end

local function variadic(cmd, key, values)
  each_slice(values, function(...) redis.call(cmd, key, ...) end)
end

-- `names` split by membership of the set `key`, one SMISMEMBER a slice (a call per name
-- costs a Lua-to-Redis round each): (the members, the others).
local function by_membership(key, names)
  local yes, no = {}, {}
  for i = 1, #names, SLICE do
    local last = math.min(i + SLICE - 1, #names)
    local found = redis.call('SMISMEMBER', key, unpack(names, i, last))
    for j = i, last do
      local into = found[j - i + 1] == 1 and yes or no
      into[#into + 1] = names[j]
    end
  end
  return yes, no
end

-- A HGETALL's {field, value} pairs by field, compared as numbers when `numeric` (ids).
local function sorted_pairs(flat, numeric)
  local out = {}
  for i = 1, #flat, 2 do
    out[#out + 1] = {flat[i], flat[i + 1], numeric and (tonumber(flat[i]) or 0) or flat[i]}
  end
  table.sort(out, function(a, b) return a[3] < b[3] end)
  return out
end

-- Whether a number has bit `bit` (a power of 2) set: no bit library in every Lua we run on.
local function has_bit(n, bit)
  return math.floor(tonumber(n) / bit) % 2 == 1
end

local PERM_WRITE = 2
local function without_write(perm)
  perm = tonumber(perm)
  return has_bit(perm, PERM_WRITE) and perm - PERM_WRITE or perm
end
