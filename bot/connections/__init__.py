"""Tools from elsewhere: MCP servers' tools and OpenAPI operations, as agent tools under our approval policies."""
