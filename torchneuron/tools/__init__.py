"""Developer tools: generators for the data the package ships."""
