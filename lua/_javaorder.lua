-- Prelude part: the order Java's HashMap and HashSet iterate String keys in, which is the
-- order RocketMQ's NameServer lists a route's QueueData and BrokerData (docs/design.md,
-- "Route order"; service/javaorder.py is the Python twin, tests/test_java_order.py holds
-- both to a real JVM). Plain arithmetic on doubles: not every Lua we run on has `bit`.

local TWO32 = 4294967296

-- String.hashCode (31 * h + c over UTF-16 code units, int32 wrapping) as an unsigned
-- 32-bit value, of a name held as UTF-8 (names come from Python strings: valid UTF-8).
local function java_hash(s)
  local h, i, n = 0, 1, #s
  while i <= n do
    local c = string.byte(s, i)
    local cp, len
    if c < 0x80 then
      cp, len = c, 1
    elseif c < 0xE0 then
      cp, len = (c % 0x20) * 0x40 + string.byte(s, i + 1) % 0x40, 2
    elseif c < 0xF0 then
      cp, len = ((c % 0x10) * 0x40 + string.byte(s, i + 1) % 0x40) * 0x40 + string.byte(s, i + 2) % 0x40, 3
    else
      cp = (((c % 0x08) * 0x40 + string.byte(s, i + 1) % 0x40) * 0x40 + string.byte(s, i + 2) % 0x40) * 0x40
        + string.byte(s, i + 3) % 0x40
      len = 4
    end
    if cp < 0x10000 then
      h = (h * 31 + cp) % TWO32
    else  -- a surrogate pair
      cp = cp - 0x10000
      h = (h * 31 + 0xD800 + math.floor(cp / 0x400)) % TWO32
      h = (h * 31 + 0xDC00 + cp % 0x400) % TWO32
    end
    i = i + len
  end
  return h
end

-- HashMap's bucket of hash `h` in a table of `cap` (a power of 2) buckets:
-- (h ^ (h >>> 16)) & (cap - 1), the XOR taken bit by bit over the bits the mask keeps.
local function java_bucket(h, cap)
  local a, b = h % cap, math.floor(h / 65536) % cap
  local x, bit = 0, 1
  while bit < cap do
    if a % 2 ~= b % 2 then
      x = x + bit
    end
    a, b, bit = math.floor(a / 2), math.floor(b / 2), bit * 2
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
  local want, cap = math.max(math.floor(n * 4 / 3) + 1, 16), 1
  while cap < want do
    cap = cap * 2
  end
  return cap
end

-- `names` (in the order they were put) in the order a hash table of `cap` buckets holding
-- them iterates: by bucket, then as put (a bucket's list keeps insertion order, resizes
-- included). A new list.
local function java_order(names, cap)
  local keyed = {}
  for i, name in ipairs(names) do
    keyed[i] = {java_bucket(java_hash(name), cap), i, name}
  end
  table.sort(keyed, function(x, y)
    if x[1] ~= y[1] then
      return x[1] < y[1]
    end
    return x[2] < y[2]
  end)
  local out = {}
  for i, k in ipairs(keyed) do
    out[i] = k[3]
  end
  return out
end
