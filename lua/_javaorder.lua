-- Prelude part: the order Java's HashMap and HashSet iterate String keys in, which is the
-- order RocketMQ's NameServer lists a route's QueueData and BrokerData (docs/design.md,
-- "Route order"; service/javaorder.py is the Python twin, tests/test_java_order.py holds
-- both to a real JVM). Redis's `bit` library where there is one; plain arithmetic on
-- doubles where not (the embedded store's Lua).

local TWO32 = 4294967296
local byte_of, floor_of = string.byte, math.floor

-- String.hashCode (31 * h + c over UTF-16 code units, int32 wrapping) as an unsigned
-- 32-bit value, of a name held as UTF-8 (names come from Python strings: valid UTF-8).
local function java_hash(s)
  local h, i, n = 0, 1, #s
  while i <= n do
    local c = byte_of(s, i)
    if c < 0x80 then
      h = (h * 31 + c) % TWO32
      i = i + 1
    else
      local cp, len
      if c < 0xE0 then
        cp, len = (c % 0x20) * 0x40 + byte_of(s, i + 1) % 0x40, 2
      elseif c < 0xF0 then
        cp, len = ((c % 0x10) * 0x40 + byte_of(s, i + 1) % 0x40) * 0x40 + byte_of(s, i + 2) % 0x40, 3
      else
        cp = (((c % 0x08) * 0x40 + byte_of(s, i + 1) % 0x40) * 0x40 + byte_of(s, i + 2) % 0x40) * 0x40
          + byte_of(s, i + 3) % 0x40
        len = 4
      end
      if cp < 0x10000 then
        h = (h * 31 + cp) % TWO32
      else  -- a surrogate pair
        cp = cp - 0x10000
        h = (h * 31 + 0xD800 + floor_of(cp / 0x400)) % TWO32
        h = (h * 31 + 0xDC00 + cp % 0x400) % TWO32
      end
      i = i + len
    end
  end
  return h
end

local BIT = rawget(_G, 'bit')  -- nil in the embedded store's Lua

-- HashMap's bucket of hash `h` in a table of `cap` (a power of 2) buckets:
-- (h ^ (h >>> 16)) & (cap - 1); without `bit`, the XOR bit by bit over the bits kept.
local function java_bucket(h, cap)
  if BIT then
    return BIT.band(BIT.bxor(h, BIT.rshift(h, 16)), cap - 1)
  end
  local a, b = h % cap, floor_of(h / 65536) % cap
  local x, bit = 0, 1
  while bit < cap do
    if a % 2 ~= b % 2 then
      x = x + bit
    end
    a, b, bit = floor_of(a / 2), floor_of(b / 2), bit * 2
  end
  return x
end

-- The table size of a HashMap grown by puts from the default 16: doubled whenever its
-- size passes 0.75 of it.
local function grown_capacity(n)
  local cap = 16
  while n > cap * 0.75 do
    cap = cap * 2
  end
  return cap
end

-- The table size of `new HashSet<>(c)` of `n` names (Java 8 to 17):
-- tableSizeFor(max((int) (n / .75f) + 1, 16)).
local function copied_capacity(n)
  local want, cap = math.max(floor_of(n * 4 / 3) + 1, 16), 1
  while cap < want do
    cap = cap * 2
  end
  return cap
end

-- `names` in the order a hash table of `cap` buckets holding them iterates: by bucket,
-- then as they were put (a bucket's list keeps insertion order, resizes included), which
-- is `rank[name]` when given (then by name), else their order in `names`. A new list.
local function java_order(names, cap, rank)
  local keyed = {}
  for i, name in ipairs(names) do
    keyed[i] = {java_bucket(java_hash(name), cap), rank and rank[name] or i, name}
  end
  table.sort(keyed, function(x, y)
    if x[1] ~= y[1] then
      return x[1] < y[1]
    elseif x[2] ~= y[2] then
      return x[2] < y[2]
    end
    return x[3] < y[3]
  end)
  local out = {}
  for i, k in ipairs(keyed) do
    out[i] = k[3]
  end
  return out
end
