"""The log: Kafka clients, table topics, reading records and following a table's log."""
