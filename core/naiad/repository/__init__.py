"""Model repositories: where model folders are found (sources) and how they are read."""
