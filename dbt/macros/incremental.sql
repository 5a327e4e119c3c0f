{#
  Incremental models rebuild only the episodes touched since their last build.

  Every staged row carries `_batch`, the staging run that wrote it, and staging appends
  (a replaced row is deleted and its new version inserted), so rows of newer batches sit
  in the last row groups, and `_batch > <watermark>` skips every older row group through
  DuckDB's min/max zone maps. Written generically (an older-rows branch for changed
  captures that already had a row, always present, with the watermark and the changed
  keys as subqueries), DuckDB overestimated the changed keys and built its hash tables on
  each staged table's million older rows: 0.9 s for 10,000 new captures. So the
  incremental model (`episodes`) first looks up what changed, as literals, with one small
  query that dbt runs while it compiles the model (`catalog_lookup`), and renders only the
  SQL the change needs: usually just the rows of the newer batches.

  It is built by the `catalog_incremental` materialization
  (macros/catalog_incremental.sql), which the look-up tells, through one comment line in
  the compiled SQL (`catalog_plan`), whether to rebuild the table or to insert the new rows
  and delete the older rows they replace.
#}

{#- The model's shape: its file's checksum and the export formats (one set of columns
    each). Kept as the table's comment; a table whose comment differs is rebuilt in full,
    so an edited model or a new format never meets a table of the old shape. -#}
{% macro catalog_fingerprint() -%}
  {{- 'dbt-model:' ~ local_md5(model.checksum.checksum ~ '|' ~ tojson(var('export_formats'))) -}}
{%- endmacro %}

{#- Whether this run may update the model's table in place: it exists as a table and this
    is not a --full-refresh (the fingerprint is checked by `catalog_lookup`). dbt's
    `is_incremental()` is true only for the `incremental` materialization. -#}
{% macro catalog_is_incremental() -%}
  {%- if not execute or should_full_refresh() -%}{{ return(false) }}{%- endif -%}
  {%- set relation = adapter.get_relation(this.database, this.schema, this.identifier) -%}
  {{ return(relation is not none and relation.is_table) }}
{%- endmacro %}

{#- `catalog_lookup(columns)`: one query while the model compiles. Returns
    full        true on a full build: no table yet, --full-refresh, or a table whose
                fingerprint (comment) is not this model's
    watermark   the last staging batch the table was built from (-1: full build)
    and, unless full, the value of each of `columns` (name -> SQL expression, which may
    use `watermark_sql`). At parse time (no database) it answers a full build. -#}
{% macro catalog_lookup(columns={}) -%}
  {%- if not catalog_is_incremental() -%}
    {{ return({'full': true, 'watermark': -1}) }}
  {%- endif -%}
  {%- set names = columns.keys() | list -%}
  {%- set selected = [
        catalog_watermark_sql() ~ ' as watermark',
        "(select comment from duckdb_tables() where database_name = '" ~ this.database
        ~ "' and schema_name = '" ~ this.schema ~ "' and table_name = '" ~ this.identifier
        ~ "') as fingerprint"] -%}
  {%- for name in names %}{% do selected.append(columns[name] ~ ' as ' ~ name) %}{% endfor -%}
  {%- set found = run_query('select ' ~ selected | join(', ')).rows[0] -%}
  {%- if found['fingerprint'] != catalog_fingerprint() -%}
    {{ return({'full': true, 'watermark': -1}) }}
  {%- endif -%}
  {%- set result = {'full': false, 'watermark': found['watermark'] | int} -%}
  {%- for name in names %}{% do result.update({name: found[name]}) %}{% endfor -%}
  {{ return(result) }}
{%- endmacro %}

{% macro catalog_watermark_sql() -%}
  (select coalesce(max(_batch), -1) from {{ this }})
{%- endmacro %}

{#- The plan for the `catalog_incremental` materialization, as a comment line of the
    compiled SQL (a model renders it first): rebuild (`full`), or insert the new rows and
    then, when `replace` is set (a query of unique keys), delete the rows of those keys
    built at or before `watermark`. No `replace`: no older row can share a key with a
    new row, and nothing is deleted. -#}
{% macro catalog_plan(changes, replace=none) -%}
-- catalog_plan: {{ tojson({
     'full': changes.full,
     'watermark': changes.watermark,
     'replace': none if changes.full else replace,
     'threads': none if changes.full or changes.changed_items >= small_change_rows()
                else changes.threads,
   }) }}
{% endmacro %}

{#- Changes with fewer staged items than this (DuckDB's row group size, its unit of scan
    parallelism) are built on one DuckDB thread (macros/catalog_incremental.sql). -#}
{% macro small_change_rows() %}{{ return(122880) }}{% endmacro %}

{#- `catalog_changes()`: what changed since the `episodes` table was last built.

    full        true on a full build (no table yet, --full-refresh, another shape), and
                when an exporter's code version changed since: every episode's export
                state may have changed, so every capture is rebuilt
    watermark   the last staging batch the table was built from (-1: full build)
    changed_items  staged items newer than the watermark (rows of every source)
    threads     DuckDB's thread count now (restored after a one-thread build)
    old_keys    how many changed items belong to captures staged at or before the
                watermark, i.e. that may already have a row in the table (their
                unchanged rows in older batches must be read too, and their old rows
                replaced or, when the raw copy was removed, deleted; usually 0: a day of
                new captures reads only new rows and deletes nothing) -#}
{% macro catalog_changes() -%}
  {%- if not catalog_is_incremental() -%}
    {{ return({'full': true, 'watermark': -1, 'old_keys': 0}) }}
  {%- endif -%}
  {#- Changed captures that already have a row were staged at or before the watermark
      (`first_batch`, kept by staging for every capture). Counting them reads only the
      newer rows of item_versions (zone maps skip the rest): no probe of the model's key
      column, so capture keys in no order cost nothing more. (A scan filtered by
      `_batch >` a one-row subquery is still pruned: DuckDB pushes the subquery's value
      into the scan as a filter once it is known.) Rows staged before `first_batch`
      existed count as older. -#}
  {%- set found = catalog_lookup({
        'formats_changed': '(select count(*) from ' ~ source('platform', 'export_formats')
                           ~ ' where _batch > ' ~ catalog_watermark_sql() ~ ')',
        'changed_items': '(select count(*) from ' ~ source('platform', 'item_versions')
                         ~ ' where _batch > ' ~ catalog_watermark_sql() ~ ')',
        'threads': "current_setting('threads')",
        'old_keys': '(select count(*) from ' ~ source('platform', 'item_versions')
                    ~ ' where _batch > ' ~ catalog_watermark_sql()
                    ~ ' and coalesce(first_batch, -1) <= ' ~ catalog_watermark_sql() ~ ')',
      }) -%}
  {%- if found.full or (found.formats_changed | int) > 0 -%}
    {{ return({'full': true, 'watermark': -1, 'old_keys': 0}) }}
  {%- endif -%}
  {{ return({'full': false, 'watermark': found.watermark, 'old_keys': found.old_keys | int,
             'changed_items': found.changed_items | int, 'threads': found.threads | int}) }}
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
  {%- if not changes.full and changes.old_keys > 0 -%}
  changed_old as materialized (
    select capture_key from {{ this }}
    where capture_key in ({{ changed_keys(changes.watermark) }})
  ),
  {%- endif -%}
{%- endmacro %}

{# The rows of a staged source that a build needs, with work proportional to what
   changed: rows written by newer batches (the `_batch` zone maps skip every older row
   group), plus, only when some changed captures already had a row, those captures'
   older rows. Full builds (also after an exporter code version changed): all rows. #}
{% macro changed_rows(relation, changes) -%}
  {%- if changes.full -%}
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
