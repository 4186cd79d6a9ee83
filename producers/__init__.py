"""What runs beside training and on the nodes and publishes to Kafka: the rank monitor and its
framework callbacks, the node agent (simulated jobs are ``stepwatch.sim``)."""
