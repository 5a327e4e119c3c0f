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

{# `changed_old` (computed once per build): the changed keys that already have a row in
   the model. Put it first in the model's WITH list; empty on full builds. #}
{% macro changed_cte() -%}
  changed_old as materialized (
    {%- if is_incremental() %}
    select capture_key from ({{ changed_keys() }}) c
    semi join {{ this }} t using (capture_key)
    {%- else %}
    select null::varchar as capture_key where false
    {%- endif %}
  )
{%- endmacro %}

{# The rows of a staged source that an incremental build needs, with work proportional to
   what changed: rows written by newer batches (found through the `_batch` zone maps, so
   only new row groups are read), plus the older rows of changed captures that are not
   new (usually none: a day of new captures reads only new rows). Full builds: all rows. #}
{% macro changed_rows(relation) -%}
  {%- if is_incremental() -%}
  (
    select * from {{ relation }} where _batch > {{ last_batch() }}
    union all
    select * from {{ relation }}
    where _batch <= {{ last_batch() }}
      and capture_key in (select capture_key from changed_old)
  )
  {%- else -%}
  {{ relation }}
  {%- endif -%}
{%- endmacro %}

{# Before an incremental build: drop the captures whose raw copy was removed since. #}
{% macro delete_removed_captures() -%}
  {%- if is_incremental() -%}
  delete from {{ this }} where capture_key in (
    select capture_key from {{ source('platform', 'item_versions') }}
    where source = 'raw_manifests' and fingerprint is null and _batch > {{ last_batch() }}
  )
  {%- else -%}
  select 1
  {%- endif -%}
{%- endmacro %}
