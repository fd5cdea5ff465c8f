"""Tests with real RocketMQ clients: the native C++ client (pip rocketmq==0.4.4) and ali-ons (npm).

Install (scripts/test):  pip install rocketmq==0.4.4
                         (cd tests/remoting/js && npm ci --no-audit --no-fund)
Each test skips, saying which, when one is missing.
"""
