'use strict';
// A real JavaScript RocketMQ remoting client (ali-ons 3.12.0) pointed at a NameServer address.
// Requests are built with ali-ons's own RemotingCommand (JSON header, language JAVA, version 121)
// and sent over its own Channel through MQClientAPI.invoke / invokeOneway.

// RMQ_JS_LOCAL_ADDRESS: every connection is made from this address (the tests' 127.0.0.x
// stand for other hosts); ali-ons connects through tcp-base's net.connect({...}).
if (process.env.RMQ_JS_LOCAL_ADDRESS) {
  const net = require('net');
  const connect = net.connect;
  net.connect = (options, ...rest) => connect({ ...options, localAddress: process.env.RMQ_JS_LOCAL_ADDRESS }, ...rest);
}

const httpclient = require('urllib');
const MQClientAPI = require('ali-ons/lib/mq_client_api');
const RemotingCommand = require('ali-ons/lib/protocol/command/remoting_command');

const quiet = { info() {}, warn() {}, error() {}, debug() {} };

async function connect(nameSrv, responseTimeout = 5000) {
  // RMQ_JS_ACCESS_KEY / RMQ_JS_SECRET_KEY: ali-ons then signs every request (RocketMQ ACL)
  const credentials = process.env.RMQ_JS_ACCESS_KEY
    ? { accessKey: process.env.RMQ_JS_ACCESS_KEY, secretKey: process.env.RMQ_JS_SECRET_KEY } : {};
  const api = new MQClientAPI({ nameSrv, httpclient, logger: quiet, responseTimeout, ...credentials });
  api.on('error', () => {}); // a closed channel is reported by the callers' results
  await api.ready();
  return api;
}

function command(code, ext, body) {
  // Header values go out as strings, as the Java client's CommandCustomHeader does.
  const header = {};
  for (const [k, v] of Object.entries(ext || {})) header[k] = String(v);
  const request = RemotingCommand.createRequestCommand(code, header);
  if (body !== undefined && body !== null) {
    request.body = Buffer.from(typeof body === 'string' ? body : JSON.stringify(body), 'utf8');
  }
  return request;
}

async function call(api, nameSrv, code, ext, body, timeout) {
  const response = await api.invoke(nameSrv, command(code, ext, body), timeout);
  return {
    opaque: response.opaque,
    code: response.code,
    flag: response.flag,
    remark: response.remark === undefined ? null : response.remark,
    ext: response.extFields || {},
    body: response.body ? response.body.toString('utf8') : null,
  };
}

async function oneway(api, nameSrv, code, ext, body) {
  const request = command(code, ext, body);
  request.markOnewayRPC();
  await api.invokeOneway(nameSrv, request);
}

module.exports = { connect, command, call, oneway };
