"""epimem as an MCP server: the tools (``api.mcp.server``) over stdio and over streamable HTTP (``api.mcp.http``)."""
