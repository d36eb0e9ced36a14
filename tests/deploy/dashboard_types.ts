// The shape k8s/monitoring/dashboards/graphfeed.json must have, from @grafana/schema.
// tests/deploy/test_monitoring.py writes the JSON into a .ts file as
// `export const dashboard: GraphfeedDashboard = <json>;` and runs `tsc --noEmit --strict`:
// as an object literal it gets TypeScript's excess-property check, so a misspelt or unknown
// key fails as well as a wrong type.
import type { DataQuery, Dashboard, FieldConfigSource, Panel, RowPanel } from "@grafana/schema";
import type {
  FieldConfig as TimeSeriesFieldConfig,
  Options as TimeSeriesOptions,
} from "@grafana/schema/dist/esm/raw/composable/timeseries/panelcfg/x/TimeSeriesPanelCfg_types.gen";

/** The JSON form of a schema type: a string enum becomes the union of its values. */
export type Json<T> = T extends string
  ? `${T}`
  : T extends (infer U)[]
    ? Json<U>[]
    : T extends object
      ? { [K in keyof T]: Json<T[K]> }
      : T;

/** A Prometheus query. @grafana/schema 13 no longer ships the Prometheus data-query type. */
export interface PrometheusQuery extends DataQuery {
  expr: string;
  legendFormat?: string;
  range?: boolean;
  instant?: boolean;
}

export type TimeSeriesPanel = Omit<Json<Panel>, "type" | "targets" | "options" | "fieldConfig"> & {
  type: "timeseries";
  title: string;
  targets: Json<PrometheusQuery>[];
  options: Json<TimeSeriesOptions>;
  fieldConfig: Omit<Json<FieldConfigSource>, "defaults"> & {
    defaults: Omit<Json<FieldConfigSource["defaults"]>, "custom"> & { custom?: Json<TimeSeriesFieldConfig> };
  };
};

/** A row header (collapsed: false, so its panels follow it at the top level). */
export type GraphfeedRow = Omit<Json<RowPanel>, "panels"> & { type: "row"; title: string; panels: [] };

export type GraphfeedDashboard = Omit<Json<Dashboard>, "panels"> & { panels: (TimeSeriesPanel | GraphfeedRow)[] };
