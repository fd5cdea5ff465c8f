-- Mark the brokers that left and came back (service/departure_copy.py): a scan pass names
-- the newest departure of each address it holds with no return marked; one whose address
-- is registered again gets when it was found so (Redis time), once (HSETNX: the first pass
-- of any worker), so the dashboard says "left 22:13, back 22:14" for the hour.
-- uses: keys, basics, changes, members
-- keys: version, changes, changelog, departures_back, live
-- ARGV: (field, address) pairs, each field `<addr>|<at>` of a departure
-- Returns {change, the fields marked}
local change = new_change()  -- invisible: readers' tables are untouched
local marked = {}
local now = int(now_ms())
for i = 1, #ARGV, 2 do
  if redis.call('EXISTS', K.live(ARGV[i + 1])) == 1
      and redis.call('HSETNX', K.departures_back(), ARGV[i], now) == 1 then
    marked[#marked + 1] = ARGV[i]
  end
end
-- a field per departure: past the record's bound, those of departures older than the hour go
if #marked > 0 then
  redis.call('PEXPIRE', K.departures_back(), DEPARTURES_MS)
  if redis.call('HLEN', K.departures_back()) > DEPARTURES_RETAIN then
    for _, field in ipairs(redis.call('HKEYS', K.departures_back())) do
      if tonumber(string.match(field, '|(%d+)$') or '0') < tonumber(now) - DEPARTURES_MS then
        redis.call('HDEL', K.departures_back(), field)
      end
    end
  end
end
return finish(change, marked)
