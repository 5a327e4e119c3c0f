"""The export API's routers, one module per group of routes (docs/api.md, "Routes")."""
