"""The plugin-map rule family: the user's ``--plugin-map`` (YAML) turns custom ops into
TensorRT plugin nodes. The map's format and its checks (mapping.py), the rule (map_rule.py).
Unlike the built-in families it is active only when a map is given (``catalog.active_rules``).
"""

from trtconv.rewrites.plugin_map.map_rule import PluginMapRule
from trtconv.rewrites.plugin_map.mapping import PluginMap, load_plugin_map, parse_plugin_map

__all__ = ["PluginMap", "PluginMapRule", "load_plugin_map", "parse_plugin_map"]
