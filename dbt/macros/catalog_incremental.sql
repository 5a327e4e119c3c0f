{#
  `catalog_incremental`: the incremental models' materialization, in one statement.

  dbt-duckdb's `incremental` materialization builds the new rows into a temporary table,
  reads the columns of that table and of the target (`describe`s for the schema-change
  check and the insert's column list), deletes and inserts, commits and drops the
  temporary table: nine statements and their Python per model. Here the model's
  compile-time look-up (`catalog_lookup`, macros/incremental.sql) has already decided,
  and says so in the first line of the compiled SQL (`-- catalog_plan: {...}`):

  * full build (no table, --full-refresh, a table of another shape, an exporter's new
    code version): `create or replace table ... as <sql>` and the model's fingerprint
    as the table's comment;
  * otherwise, in one statement and one transaction: the model's in-transaction
    pre-hooks, `insert ... by name` of the new rows straight from the model's query
    (no temporary table: the query may still read the table's old rows), then, only
    when the plan names keys to `replace` (some rebuilt key already had a row), the
    delete of those keys' rows built at or before the watermark. A day of new captures
    is one insert. When the plan says the change is small (`threads`: fewer changed
    items than one DuckDB row group, so every scan is one task anyway), the statement
    runs on one DuckDB thread and the previous thread count is restored after the
    commit: on 10,000 new captures that is about 10 ms (a fifth) less than letting
    DuckDB's scheduler split so small a plan over two threads.

  There is no `on_schema_change` check at refresh time: the model's shape is its
  fingerprint (file checksum and export formats), and a table whose comment differs is
  rebuilt in full by the look-up. Any other change that alters a model's columns needs
  `dbt run --full-refresh` (an insert by name into a table lacking a column fails).
#}
{% materialization catalog_incremental, adapter='duckdb' -%}
  {%- set target_relation = this.incorporate(type='table') -%}
  {%- set existing_relation = load_cached_relation(this) -%}
  {%- set marker = '-- catalog_plan: ' -%}
  {%- if marker not in sql -%}
    {{ exceptions.raise_compiler_error(
         'catalog_incremental: ' ~ this ~ ' renders no catalog_plan() line') }}
  {%- endif -%}
  {%- set plan = fromjson(sql.split(marker)[1].split('\n')[0]) -%}
  {%- set unique_key = config.require('unique_key') -%}
  {%- set keys = ([unique_key] if unique_key is string else unique_key) | join(', ') -%}

  {{ run_hooks(pre_hooks, inside_transaction=False) }}

  {%- if plan.full and existing_relation is not none and not existing_relation.is_table %}
    {{ adapter.drop_relation(existing_relation) }}
  {%- endif %}
  {% call statement('main') -%}
    {%- for hook in pre_hooks | selectattr('transaction', 'equalto', true) %}
    {%- set rendered = render(hook.get('sql')) | trim %}
    {%- if rendered %}
    {{ rendered }};
    {%- endif %}
    {%- endfor %}
    {%- if plan.full %}
    create or replace table {{ target_relation }} as (
      {{ sql }}
    );
    comment on table {{ target_relation }} is '{{ catalog_fingerprint() }}'
    {%- else %}
    {%- if plan.threads %}
    set threads = 1;
    {%- endif %}
    insert into {{ target_relation }} by name select * from (
      {{ sql }}
    )
    {%- if plan.replace %};
    delete from {{ target_relation }}
    where _batch <= {{ plan.watermark }} and ({{ keys }}) in ({{ plan.replace }})
    {%- endif %}
    {%- endif %}
  {%- endcall %}

  {{ run_hooks(post_hooks, inside_transaction=True) }}
  {{ adapter.commit() }}
  {%- if not plan.full and plan.threads %}
  {% call statement('restore_threads') %}set threads = {{ plan.threads | int }}{% endcall %}
  {%- endif %}
  {{ run_hooks(post_hooks, inside_transaction=False) }}

  {{ return({'relations': [target_relation]}) }}
{%- endmaterialization %}
