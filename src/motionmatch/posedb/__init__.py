"""The pose database: building, features, events, annotations and where the data lives."""
