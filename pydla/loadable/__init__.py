"""The loadable: the compiled-network container and the run recipe."""
