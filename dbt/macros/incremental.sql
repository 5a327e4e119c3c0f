{#
  Incremental models rebuild only the episodes touched since their last build.

  `last_batch()`: the staging batch the model's table was last built from (-1 when empty).
  `changed_keys()`: capture keys whose staged rows changed after that batch (any source,
  removals included), or every key when an exporter's code version changed (that changes
  every episode's export state).
#}
{% macro last_batch() -%}
  (select coalesce(max(_batch), -1) from {{ this }})
{%- endmacro %}

{% macro current_batch() -%}
  (select coalesce(max(_batch), 0) from {{ source('platform', 'batches') }})
{%- endmacro %}

{% macro changed_keys() -%}
  select capture_key from {{ source('platform', 'item_versions') }}
  where _batch > {{ last_batch() }}
  union
  select capture_key from {{ source('platform', 'raw_manifests') }}
  where exists (
    select 1 from {{ source('platform', 'export_formats') }} where _batch > {{ last_batch() }}
  )
{%- endmacro %}

{# `where capture_key in (changed keys)` on incremental runs, nothing on full builds. #}
{% macro only_changed(column='capture_key') -%}
  {%- if is_incremental() %} where {{ column }} in ({{ changed_keys() }}){% endif -%}
{%- endmacro %}
