#!/bin/bash
# The apache/kafka image's kafka-cluster.sh (ClusterTool from kafka-tools): the compose file's
# health check asks the broker for its cluster id with it.
exec java -Xmx128m -Dlog4j2.configurationFile=/opt/kafka/config/log4j2.properties \
  -cp "/opt/kafka/libs/*" org.apache.kafka.tools.ClusterTool "$@"
