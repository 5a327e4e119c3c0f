{{ config(materialized='stable_view') }}
{#- One row per export format, also for a format with no receipt yet: how many episodes
    are exported (current), skipped by the exporter (current receipt, no data: e.g. no head
    camera), blocked by the gate, stale or missing, and the first
    `coverage_list_limit` capture keys of each (all of them: query `episodes`). A view,
    like dataset_composition: computed from `episodes` when queried. -#}
{%- set limit = var('coverage_list_limit') %}
{%- for fmt in var('export_formats') %}
{%- if not loop.first %}
union all
{%- endif %}
select
  f.format,
  any_value(f.current_code_version) as current_code_version,
  count(e.capture_key) as episodes,
  count_if(e.{{ fmt }}_state = 'exported') as exported,
  count_if(e.{{ fmt }}_state = 'skipped') as skipped,
  count_if(e.{{ fmt }}_state = 'blocked') as blocked,
  count_if(e.{{ fmt }}_state = 'stale') as stale,
  count_if(e.{{ fmt }}_state = 'missing') as missing,
  coalesce(sum(e.{{ fmt }}_bytes) filter (where e.{{ fmt }}_state = 'exported'), 0)
    as exported_bytes,
  coalesce(min(e.capture_key, {{ limit }}) filter (where e.{{ fmt }}_state = 'skipped'), [])
    as skipped_keys,
  coalesce(min(e.capture_key, {{ limit }}) filter (where e.{{ fmt }}_state = 'blocked'), [])
    as blocked_keys,
  coalesce(min(e.capture_key, {{ limit }}) filter (where e.{{ fmt }}_state = 'stale'), [])
    as stale_keys,
  coalesce(min(e.capture_key, {{ limit }}) filter (where e.{{ fmt }}_state = 'missing'), [])
    as missing_keys
from {{ source('platform', 'export_formats') }} f
left join {{ ref('episodes') }} e on true
where f.format = '{{ fmt }}'
group by f.format
{%- endfor %}
