"""Compile-only stand-ins for the few classes the NameServer build's sources name but no
library on the machine provides (bench/build_java_namesrv.py).

They are our own minimal code, put on javac's class path and never into the built jars,
so the classes that name them compile unchanged. None is reached by a NameServer run:
- fastjson's `MonetaCodec` (JSR 354 money) and `SwaggerJsonSerializer` (springfox) are
  only picked when a value of those types is (de)serialised;
- RocketMQ's `ClusterTestRequestProcessor` (namesrv) builds a `DefaultMQAdminExt` of the
  client/tools modules only with `clusterTest=true`, which the bench never sets (the
  NameServer would then fail with NoClassDefFoundError instead of starting).
Each body throws: reaching one means that assumption broke.
"""

from __future__ import annotations

_THROW = "{ throw new UnsupportedOperationException(\"compile-only stub\"); }"

# needed before fastjson compiles
FASTJSON: dict[str, str] = {
    "javax/money/CurrencyUnit.java":
        "package javax.money;\npublic interface CurrencyUnit { String getCurrencyCode(); }\n",
    "javax/money/Monetary.java":
        "package javax.money;\npublic final class Monetary {\n"
        f"  public static CurrencyUnit getCurrency(String code) {_THROW}\n}}\n",
    "org/javamoney/moneta/Money.java":
        "package org.javamoney.moneta;\npublic final class Money {\n"
        f"  public static Money of(Number n, javax.money.CurrencyUnit c) {_THROW}\n"
        f"  public java.math.BigDecimal getNumberStripped() {_THROW}\n"
        f"  public javax.money.CurrencyUnit getCurrency() {_THROW}\n}}\n",
    "springfox/documentation/spring/web/json/Json.java":
        "package springfox.documentation.spring.web.json;\npublic class Json {\n"
        f"  public String value() {_THROW}\n}}\n",
}

# needed before namesrv compiles (they name rocketmq-common's TopicRouteData)
NAMESRV: dict[str, str] = {
    "org/apache/rocketmq/client/exception/MQClientException.java":
        "package org.apache.rocketmq.client.exception;\npublic class MQClientException extends Exception { }\n",
    "org/apache/rocketmq/tools/admin/DefaultMQAdminExt.java":
        "package org.apache.rocketmq.tools.admin;\npublic class DefaultMQAdminExt {\n"
        f"  public void setInstanceName(String s) {_THROW}\n"
        f"  public void setUnitName(String s) {_THROW}\n"
        f"  public void start() throws org.apache.rocketmq.client.exception.MQClientException {_THROW}\n"
        "  public org.apache.rocketmq.common.protocol.route.TopicRouteData examineTopicRouteInfo(String t)\n"
        f"      throws Exception {_THROW}\n}}\n",
}
