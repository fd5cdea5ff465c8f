'use strict';
// node session.js <host:port>
// One ali-ons client, one TCP connection to the NameServer address, kept open until stdin ends
// (or the process is killed). Reads one JSON request per stdin line, writes one JSON line per answer:
//   {"code": 103, "ext": {...}, "body": <string or JSON value>}   -> {"code", "remark", "ext", "body", "opaque"}
//   {"code": 904, "ext": {...}, "oneway": true}                    -> {"sent": true}
//   {"op": "route", "topic": "T"}    ali-ons's own getDefaultTopicRouteInfoFromNameServer -> {"route": {...}}
//   {"op": "exit"}                   closes the client (FIN) and exits
// Errors answer {"error": "..."} and the session goes on.

const readline = require('readline');
const { connect, call, oneway } = require('./lib');

async function main() {
  const nameSrv = process.argv[2];
  if (!nameSrv) throw new Error('usage: node session.js <host:port>');
  const api = await connect(nameSrv);
  const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
  out({ ready: true });
  const lines = readline.createInterface({ input: process.stdin });
  for await (const line of lines) {
    if (!line.trim()) continue;
    let req;
    try {
      req = JSON.parse(line);
      if (req.op === 'exit') break;
      if (req.op === 'route') {
        out({ route: await api.getDefaultTopicRouteInfoFromNameServer(req.topic, req.timeout || 5000) });
      } else if (req.oneway) {
        await oneway(api, nameSrv, req.code, req.ext, req.body);
        out({ sent: true });
      } else {
        out(await call(api, nameSrv, req.code, req.ext, req.body, req.timeout || 5000));
      }
    } catch (err) {
      out({ error: String(err && err.message || err), name: err && err.name, code: err && err.code });
    }
  }
  await api.close();
  process.exit(0);
}

main().catch(err => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
