"""Change events sent to webhooks: subscriptions, a durable outbox, signed deliveries (memory.events)."""
