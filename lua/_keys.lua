-- Prelude part: key names (service/keys.py's twins: change both together), all built from
-- the tag of KEYS[1], the version counter, so every key of a call is in one Cluster slot.

local TAG = string.sub(KEYS[1], 1, #KEYS[1] - #':version')

-- A name as it stands in a key: service/keys.py encode_name (its docstring says why), byte
-- for byte. Each name is checked once per call, then found in `encoded`: a registration
-- builds keys for 10,000 topics, most twice, and this costs it a few percent.
local KEPT_ONLY = '^[a-zA-Z0-9_.%%|%-]*$'
local UNKEPT = '[^a-zA-Z0-9_.%%|%-]'
local encoded = {}
local function escape_byte(c) return string.format('~%02X', string.byte(c)) end
local function enc(name)
  local e = encoded[name]
  if e == nil then
    e = string.find(name, KEPT_ONLY) and name or (string.gsub(name, UNKEPT, escape_byte))
    encoded[name] = e
  end
  return e
end

-- Addresses stand last in their keys and go in as they are.
local K = {}
function K.clusters() return TAG .. ':clusters' end
function K.cluster(c) return TAG .. ':cluster:' .. enc(c) end
function K.broker(n) return TAG .. ':broker:' .. enc(n) end
function K.addrs(n) return TAG .. ':addrs:' .. enc(n) end
function K.broker_topics(n) return TAG .. ':broker-topics:' .. enc(n) end
function K.topics() return TAG .. ':topics' end
function K.topic_index() return TAG .. ':topic-index' end
function K.staged_topics() return TAG .. ':staged-topics' end
function K.stagings() return TAG .. ':stagings' end
function K.leaving() return TAG .. ':leaving' end
function K.topic(t) return TAG .. ':topic:' .. enc(t) end
function K.queue(t, n) return TAG .. ':queue:' .. enc(t) .. ':' .. enc(n) end
function K.live(a) return TAG .. ':live:' .. a end
function K.expiry() return TAG .. ':expiry' end
function K.member(a) return TAG .. ':member:' .. a end
function K.filter(a) return TAG .. ':filter:' .. a end
function K.mapping(t) return TAG .. ':mapping:' .. enc(t) end
function K.mapped(n) return TAG .. ':mapped:' .. enc(n) end
function K.body_digests() return TAG .. ':body-digests' end
function K.masterless() return TAG .. ':masterless' end
function K.topics_gen() return TAG .. ':topics-gen' end
function K.queue_seq() return TAG .. ':queue-seq' end
function K.topic_capacity() return TAG .. ':topic-capacity' end
function K.kv_namespaces() return TAG .. ':kv-namespaces' end
function K.kv(ns) return TAG .. ':kv:' .. enc(ns) end
function K.changes() return TAG .. ':changes' end
function K.changelog() return TAG .. ':changelog' end
function K.departures() return TAG .. ':departures' end
function K.departures_back() return TAG .. ':departures-back' end
function K.schema() return TAG .. ':schema-version' end
function K.dataset() return TAG .. ':dataset' end
function K.store_reset() return TAG .. ':store-reset' end
local ORDER_TOPIC_CONFIG = 'ORDER_TOPIC_CONFIG'
