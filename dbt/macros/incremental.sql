{#
  Incremental models rebuild only the episodes touched since their last build.

  Every staged row carries `_batch`, the staging run that wrote it, and staging appends
  (a replaced row is deleted and its new version inserted), so rows of newer batches sit
  in the last row groups, and `_batch > <watermark>` skips every older row group through
  DuckDB's min/max zone maps. Written generically (an older-rows branch for changed
  captures that already had a row, always present, with the watermark and the changed
  keys as subqueries), DuckDB overestimated the changed keys and built its hash tables on
  each staged table's million older rows: 0.9 s for 10,000 new captures. So the
  incremental models first look up what changed, as literals, with two small queries that
  dbt runs while it compiles the model (`catalog_changes`), and render only the SQL the
  change needs: usually just the rows of the newer batches.
#}

{#- `catalog_changes()`: what changed since this model's table was last built.

    watermark   the last staging batch the table was built from (-1: full build)
    full        true on a full build (no table yet, or --full-refresh)
    all_keys    an exporter's code version changed since: every episode's export state
                may have changed, so every capture is rebuilt
    old_keys    how many of the changed captures already have a row in the table
                (their unchanged rows in older batches must be read too; usually 0: a
                day of new captures reads only new rows)

    At parse time (no database) it answers a full build. -#}
{% macro catalog_changes() -%}
  {%- if not (execute and is_incremental()) -%}
    {{ return({'full': true, 'watermark': -1, 'all_keys': true, 'old_keys': 0}) }}
  {%- endif -%}
  {%- set watermark_sql = '(select coalesce(max(_batch), -1) from ' ~ this ~ ')' -%}
  {#- The changed keys go to a temporary table first: its exact size makes DuckDB build
      the join's hash table on those few keys and probe the model's key column once
      (against a subquery, whose size it overestimates, it builds on the model's
      million keys instead: 0.5 s). No other column of the model is read. (A scan
      filtered by `_batch >` a one-row subquery is still pruned: DuckDB pushes the
      subquery's value into the scan as a filter once it is known.) -#}
  {%- do run_query(
        'create or replace temporary table catalog_changed_keys as select distinct '
        ~ 'capture_key from ' ~ source('platform', 'item_versions')
        ~ ' where _batch > ' ~ watermark_sql) -%}
  {%- set found = run_query(
        'select ' ~ watermark_sql ~ ' as watermark, '
        ~ '(select count(*) from ' ~ source('platform', 'export_formats')
        ~ ' where _batch > ' ~ watermark_sql ~ ') as formats_changed, '
        ~ '(select count(*) from ' ~ this ~ ' where capture_key in '
        ~ '(select capture_key from catalog_changed_keys)) as old_keys') -%}
  {%- set row = found.rows[0] -%}
  {{ return({
      'full': false,
      'watermark': row['watermark'] | int,
      'all_keys': (row['formats_changed'] | int) > 0,
      'old_keys': row['old_keys'] | int,
  }) }}
{%- endmacro %}

{% macro current_batch() -%}
  (select coalesce(max(_batch), 0) from {{ source('platform', 'batches') }})
{%- endmacro %}

{#- Capture keys with a staged row (any source, removals included) newer than `watermark`. -#}
{% macro changed_keys(watermark) -%}
  select capture_key from {{ source('platform', 'item_versions') }} where _batch > {{ watermark }}
{%- endmacro %}

{# `changed_old`: the changed keys that already have a row in the model (only rendered,
   and computed once per build, when there are some). Put it first in the WITH list. #}
{% macro changed_cte(changes) -%}
  {%- if not changes.full and not changes.all_keys and changes.old_keys > 0 -%}
  changed_old as materialized (
    select capture_key from {{ this }}
    where capture_key in ({{ changed_keys(changes.watermark) }})
  ),
  {%- endif -%}
{%- endmacro %}

{# The rows of a staged source that a build needs, with work proportional to what
   changed: rows written by newer batches (the `_batch` zone maps skip every older row
   group), plus, only when some changed captures already had a row, those captures'
   older rows. Full builds, and builds after an exporter code version changed: all rows. #}
{% macro changed_rows(relation, changes) -%}
  {%- if changes.full or changes.all_keys -%}
  {{ relation }}
  {%- elif changes.old_keys > 0 -%}
  (
    select * from {{ relation }} where _batch > {{ changes.watermark }}
    union all
    select * from {{ relation }}
    where _batch <= {{ changes.watermark }}
      and capture_key in (select capture_key from changed_old)
  )
  {%- else -%}
  (select * from {{ relation }} where _batch > {{ changes.watermark }})
  {%- endif -%}
{%- endmacro %}

{# Before an incremental build: drop the captures whose raw copy was removed since (one
   statement: usually there are none, and the subquery's value prunes the scan). #}
{% macro delete_removed_captures() -%}
  {%- if is_incremental() -%}
  delete from {{ this }} where capture_key in (
    select capture_key from {{ source('platform', 'item_versions') }}
    where _batch > (select coalesce(max(_batch), -1) from {{ this }})
      and source = 'raw_manifests' and fingerprint is null
  )
  {%- else -%}
  select 1
  {%- endif -%}
{%- endmacro %}
