"""Everything that publishes to Kafka: simulator, training callback, node agent."""
