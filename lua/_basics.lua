-- Prelude part: Redis time, numbers as digits, variadic calls in slices, perm bits.

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
  if #a ~= #b then
    return #a > #b
  end
  return a > b
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

local function delete_keys(keys)
  each_slice(keys, function(...) redis.call('DEL', ...) end)
end

-- Whether a perm has its write bit, and the perm with it cleared (no bit library in
-- every Lua we run on).
local PERM_WRITE = 2
local function writable(perm)
  return math.floor(tonumber(perm) / PERM_WRITE) % 2 == 1
end
local function without_write(perm)
  perm = tonumber(perm)
  if writable(perm) then
    return perm - PERM_WRITE
  end
  return perm
end
