'use strict';
// node route.js <host:port> <topic>: the topic's route as ali-ons's own MQClientAPI reads it
// (GET_ROUTEINFO_BY_TOPIC, parsed with its JSON2 parser, queueDatas/brokerDatas sorted), printed as JSON.
// Exit 2 with {"error"} when the NameServer has no route.

const { connect } = require('./lib');

async function main() {
  const [nameSrv, topic] = process.argv.slice(2);
  const api = await connect(nameSrv);
  try {
    const route = await api.getDefaultTopicRouteInfoFromNameServer(topic, 5000);
    process.stdout.write(JSON.stringify(route) + '\n');
  } catch (err) {
    process.stdout.write(JSON.stringify({ error: err.message, name: err.name }) + '\n');
    process.exitCode = 2;
  }
  await api.close();
}

main().catch(err => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
